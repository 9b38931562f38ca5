#!/usr/bin/env bash
# Every normative sentence of docs/ABI.md and of the headers' comments has a test that
# names it (issue 27). tests/contracts/<document>.tsv maps sentences to tests, one line
#   <fragment> TAB <test>[,<test>...] [TAB <note>]
# <fragment> is a verbatim piece of one sentence (whitespace runs count as one space),
# found in exactly one sentence of the document: it names that sentence. A <test> is
#   test_<module>__<case>   a cmocka case: a function of tests/*.c or tests/*.cc
#   check_<name>            a script, tests/check_<name>.sh
#   Class.Method            a C# or Java binding test (bindings/csharp/tests, bindings/java/tests)
#   TestName                a Go binding test: func TestName in bindings/go/*_test.go
#   -                       no test can assert it: the third column says why
#   TODO                    not yet tested: counted as a sentence without a test (a failure)
# Lines starting with '#' and empty lines are ignored.
#
# Sentences. Markdown: each paragraph or list item, joined across lines, split after
# '.', '!' or '?' followed by a space ("...", "e.g.", "i.e.", "etc." end none);
# headings and code blocks are not sentences. Headers: the text of every /* ... */
# comment, the '*' margins dropped and lines joined; an empty line, a '- ' list item
# or a '----' heading line starts a new paragraph; lines of example code (a '//' comment,
# ending in '{' or '}', or an assignment ending in ';') are dropped; paragraphs are
# split as in Markdown, and the end of a paragraph or comment ends a sentence. A
# sentence repeated verbatim in a document ("options->maximum_shapes must be NULL."
# under tpu_rewrite and tpu_shard) is one sentence: its line names the tests of each.
#
# Normative (the rule): a sentence is normative when it names a TPU_ constant (a status,
# a default, an enum value), a default ("default", "0:", "nonzero:", "all 0:") or a
# NULL, or holds one of the words
#   must never always only return(s) fail(s) accept(s) belong(s) valid block(s)
#   wait(s) deadline errors exactly every unless nothing idempotent immutable
#   exported give(s) release(s) free(s) named caller's crosses carries owns runs
#   "at once" "may be" "may not" "is not allowed"
# (whole words, any case). Others (explanations, history) need no table line, but may
# have one; a TODO line fails whatever the sentence.
#
# Fails, naming each offender, when a normative sentence has no line (or only TODO), a
# fragment matches no sentence or several, two lines name one sentence, or a named test
# does not exist, or a case of tests/test_contracts.c (written for a sentence) is named
# by no line, or a public header (include/tpurt/*.h) has no table. Listed, not checked: the
# cases of test_system, test_replicate and test_caller_threads no line names.
#   make test T=check_contracts, or bash tests/check_contracts.sh [-v|-a] (-v: also every
#   sentence and its tests, and the names of those cases; -a: also the sentences the
#   rule finds not normative)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
exec python3 - "$@" <<'PY'
import glob, os, re, sys

verbose = '-v' in sys.argv[1:] or '-a' in sys.argv[1:]
show_all = '-a' in sys.argv[1:]
COVERED = ['docs/ABI.md', 'include/tpurt/replicate.h', 'include/tpurt/system.h', 'include/tpurt/feed.h']
COVERED += ['include/tpurt/cluster.h', 'include/tpurt/common.h', 'include/tpurt/topology.h']
COVERED += ['include/tpurt/collectives.h', 'include/tpurt/embedding.h', 'include/tpurt/mesh.h', 'include/tpurt/tensor.h']
COVERED += ['include/tpurt/checkpoint.h']
# The cmocka binaries whose cases are these documents' tests (their unnamed cases are
# counted; test_contracts' fail).
MODULES = ['test_system', 'test_replicate', 'test_caller_threads', 'test_contracts']

CONSTANT = re.compile(r'\bTPU_[A-Z0-9_]+\b')  # case matters: tpu_step_options is no constant
NORMATIVE = re.compile(
    r'\bNULL\b|\bdefaults?\b|(?:^|[\s(])(?:0|nonzero|all 0)(?: \(default\))?:|'
    r'\b(?:must|never|always|only|returns?|fails?|accepts?|belongs?|valid|blocks?|waits?|deadline|'
    r'errors|exactly|at once|may be|may not|is not allowed|idempotent|nothing|unless|every|'
    r'immutable|exported|gives?|releases?|free|frees|named|caller\'s|crosses|carries|owns|runs)\b',
    re.I)
SPLIT = re.compile(r'(?<=[^.][.!?])(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\betc\.)\s+(?=\S)')

def norm(s):
    return re.sub(r'\s+', ' ', s).strip()

def split_block(text):
    text = norm(text)
    return [s for s in (norm(p) for p in SPLIT.split(text)) if re.search(r'[A-Za-z]', s)]

def markdown_sentences(path):
    out, block, code = [], [], False
    def flush():
        if block:
            out.extend(split_block(' '.join(block)))
            block.clear()
    for line in open(path, encoding='utf-8'):
        line = line.rstrip('\n')
        if line.startswith('```'):
            flush(); code = not code; continue
        if code:
            continue
        if not line.strip() or line.startswith('#'):
            flush(); continue
        if re.match(r'\s*(?:[-*]|\d+\.)\s', line):
            flush()
            line = re.sub(r'^\s*(?:[-*]|\d+\.)\s', '', line)
        block.append(line.replace('**', ''))
    flush()
    return out

def header_sentences(path):
    out = []
    src = open(path, encoding='utf-8').read()
    for m in re.finditer(r'/\*(.*?)\*/', src, re.S):
        block = []
        def flush():
            if block:
                out.extend(split_block(' '.join(block)))
                block.clear()
        for line in m.group(1).split('\n'):
            line = re.sub(r'^\s*\*(?: |$)', '', line).strip()
            if (not line or line.startswith('---') or re.search(r'(?:^|\s)//', line)
                    or re.search(r'[{}]$', line)
                    or re.search(r' = .*;$', line)):
                flush(); continue
            if line.startswith('- '):
                flush(); line = line[2:]
            block.append(line)
        flush()
    return out

def sentences(path):
    found = markdown_sentences(path) if path.endswith('.md') else header_sentences(path)
    return list(dict.fromkeys(found))  # a sentence repeated verbatim is one sentence

# ---- the tests that exist -------------------------------------------------------
def read(paths):
    text = {}
    for p in paths:
        try:
            text[p] = open(p, encoding='utf-8', errors='replace').read()
        except OSError:
            pass
    return text

c_src = read(sorted(glob.glob('tests/*.c') + glob.glob('tests/*.cc')))
c_cases = set()
for t in c_src.values():
    c_cases.update(re.findall(r'\bvoid\s+(test_\w+__\w+)\s*\(', t))
cs_src = read(glob.glob('bindings/csharp/tests/**/*.cs', recursive=True))
java_src = read(glob.glob('bindings/java/tests/**/*.java', recursive=True))
go_src = read(glob.glob('bindings/go/*_test.go'))

def class_has(srcs, cls, method):
    for t in srcs.values():
        m = re.search(r'\bclass\s+%s\b' % re.escape(cls), t)
        if m and re.search(r'\b%s\s*\(' % re.escape(method), t[m.start():]):
            return True
    return False

def test_exists(name):
    if re.fullmatch(r'test_\w+__\w+', name):
        return name in c_cases
    if re.fullmatch(r'check_\w+', name):
        return os.path.isfile('tests/%s.sh' % name)
    m = re.fullmatch(r'(\w+)\.(\w+)', name)
    if m:
        return class_has(cs_src, *m.groups()) or class_has(java_src, *m.groups())
    if re.fullmatch(r'Test\w+', name):
        return any(re.search(r'^func %s\(' % name, t, re.M) for t in go_src.values())
    return False

# ---- the check -------------------------------------------------------------------
problems, total, without, named_tests = [], 0, 0, set()
summary = []
for doc in COVERED:
    table = 'tests/contracts/%s.tsv' % os.path.basename(doc)
    sents = sentences(doc)
    tests_of = [None] * len(sents)
    line_of = [None] * len(sents)
    if not os.path.isfile(table):
        problems.append('%s: no table %s' % (doc, table))
        rows = []
    else:
        rows = open(table, encoding='utf-8').read().split('\n')
    for n, row in enumerate(rows, 1):
        if not row.strip() or row.startswith('#'):
            continue
        cols = row.split('\t')
        where = '%s:%d' % (table, n)
        if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
            problems.append('%s: not "<fragment> TAB <tests>": %s' % (where, row)); continue
        frag, tests = norm(cols[0]), [t.strip() for t in cols[1].split(',') if t.strip()]
        hits = [i for i, s in enumerate(sents) if frag in s]
        if not hits:
            problems.append('%s: the fragment matches no sentence of %s: "%s"' % (where, doc, frag)); continue
        if len(hits) > 1:
            problems.append('%s: the fragment matches %d sentences of %s: "%s"' % (where, len(hits), doc, frag)); continue
        i = hits[0]
        if line_of[i] is not None:
            problems.append('%s: a second line for the sentence of line %d: "%s"' % (where, line_of[i], sents[i])); continue
        line_of[i] = n
        if tests == ['-']:
            if len(cols) < 3 or not cols[2].strip():
                problems.append('%s: "-" without a reason (third column): "%s"' % (where, frag))
            tests_of[i] = []
            continue
        if 'TODO' in tests:
            tests_of[i] = None
            continue
        tests_of[i] = tests
        for t in tests:
            if not test_exists(t):
                problems.append('%s: no test %s (for "%s")' % (where, t, frag))
            named_tests.add(t)
    nn = nmapped = 0
    for i, s in enumerate(sents):
        normative = bool(CONSTANT.search(s) or NORMATIVE.search(s))
        if normative or line_of[i] is not None:
            nn += 1
        if tests_of[i] is None and (normative or line_of[i] is not None):
            without += 1
            why = 'TODO' if line_of[i] is not None else 'no table line'
            problems.append('%s: normative sentence without a test (%s): "%s"' % (doc, why, s))
        elif tests_of[i] is not None:
            nmapped += 1
        if show_all and not normative and line_of[i] is None:
            print('%s (not normative): %s' % (doc, s))
        if verbose and (normative or line_of[i] is not None):
            print('%s: %s\n    -> %s' % (doc, s, ', '.join(tests_of[i]) if tests_of[i] else
                                        ('-' if tests_of[i] == [] else 'NONE')))
    total += nn
    summary.append('%s: %d sentences, %d with a line' % (doc, nn, nmapped))

others = sorted(set(glob.glob('include/tpurt/*.h')) - set(COVERED))
for s in summary:
    print(s)
# Every public header is covered: a new one needs its table (and COVERED above).
for o in others:
    problems.append('%s: no contract table (%d normative sentences): add tests/contracts/%s.tsv and list it in COVERED'
                    % (o, sum(1 for x in sentences(o) if CONSTANT.search(x) or NORMATIVE.search(x)),
                       os.path.basename(o)))
unnamed = sorted(c for c in c_cases if c.split('__')[0] in MODULES and c not in named_tests)
print('cases of %s that no line names: %d%s' % (', '.join(MODULES), len(unnamed),
                                                ' (-v lists them)' if unnamed and not verbose else ''))
if verbose and unnamed:
    print('  ' + ' '.join(unnamed))
for c in unnamed:
    if c.startswith('test_contracts__'):  # written for a sentence: it must name one
        problems.append('%s names no sentence: give it a table line or remove it' % c)
sys.stdout.flush()
for p in problems:
    print('check_contracts: ' + p, file=sys.stderr)
sys.stderr.flush()
print('contracts: %d sentences, %d tests, %d without a test' % (total, len(named_tests), without))
sys.exit(1 if problems else 0)
PY
