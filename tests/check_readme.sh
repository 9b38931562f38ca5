#!/usr/bin/env bash
# README.md and docs/*.md as a reader takes them (issue 32):
# - every link of README.md, docs/*.md, bench/*.md and the bindings' READMEs points at
#   a file of the tree, and every #anchor at a heading (GitHub's slugs) or an <a id> of its file;
# - README.md keeps the two commands .ci/run and new users depend on;
# - every code block of README.md runs: ```c compiled against the build and run,
#   ```csharp, ```java, ```go and ```python through the bindings' build, ```sh with
#   bash from the root. A program block must be preceded by <!-- output: ... --> with
#   its exact output; a block that must not run (it installs, or runs every test) is
#   preceded by <!-- norun: reason -->. ```text blocks (files, output) are not code. A
#   block without a language, or an indented one, fails: nothing escapes the check.
# - the C# snippet of bindings/csharp/README.md compiles and prints "28 8" (once
#   tests/check_readme_csharp.sh);
# - the README's plot, docs/standing.svg, is what bench/plot_standing.sh (gnuplot) draws
#   from docs/PERFORMANCE.md's table, byte for byte.
# Under SANITIZE the links are checked and no block runs (the managed runtimes load the
# plain library).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
if [ -z "${SANITIZE:-}" ]; then
  # The build the blocks run against; each binding's build is cached in $BUILD.
  make --no-print-directory -s BUILD="$BUILD" lib bindings-csharp bindings-java bindings-go \
    "$BUILD/bindings/python/_tpurt$(python3-config --extension-suffix)" >/dev/null
fi
exec python3 - "$BUILD" "${SANITIZE:-}" <<'PY'
import atexit, glob, os, re, shutil, subprocess, sys, tempfile

build, sanitize = sys.argv[1], sys.argv[2]
root = os.getcwd()
problems = []

def strip_code(text):
    """The text with fenced blocks and inline code blanked (lines kept)."""
    out, fence = [], False
    for line in text.split('\n'):
        if line.lstrip().startswith('```'):
            fence = not fence
            out.append('')
            continue
        out.append('' if fence else re.sub(r'`[^`]*`', '', line))
    return '\n'.join(out)

def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    h = re.sub(r'`|\*\*|\[([^\]]*)\]\([^)]*\)', lambda m: m.group(1) or '', heading.strip())
    h = h.lower()
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')

anchor_cache = {}
def anchors(path):
    if path not in anchor_cache:
        seen, found = {}, set()
        text = strip_code(open(path, encoding='utf-8').read())
        for line in text.split('\n'):
            m = re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else '%s-%d' % (s, n))
            found.update(re.findall(r'<a\s+(?:id|name)="([^"]+)"', line))
        anchor_cache[path] = found
    return anchor_cache[path]

docs = ['README.md'] + sorted(glob.glob('docs/*.md')) + sorted(glob.glob('bindings/*/README.md')) + ['bench/README.md', 'bench/RESULTS.md']
links = 0
for doc in docs:
    text = strip_code(open(doc, encoding='utf-8').read())
    for n, line in enumerate(text.split('\n'), 1):
        for target in re.findall(r'\]\(([^)\s]+)(?:\s+"[^"]*")?\)', line):
            links += 1
            where = '%s:%d: %s' % (doc, n, target)
            if re.match(r'[a-z]+:', target):
                continue  # http(s), mailto: outside the tree
            path, _, frag = target.partition('#')
            full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            if full.startswith('..'):
                problems.append('%s: outside the tree' % where); continue
            if not os.path.exists(full):
                problems.append('%s: no file %s' % (where, full)); continue
            if frag:
                if not full.endswith('.md'):
                    problems.append('%s: an anchor into a file that is not Markdown' % where)
                elif frag not in anchors(full):
                    problems.append('%s: %s has no heading or <a id> "%s"' % (where, full, frag))

# The README's plot draws docs/PERFORMANCE.md's table: the two must agree.
p = subprocess.run(['bash', 'bench/plot_standing.sh', '--check'], stderr=subprocess.PIPE)
if p.returncode != 0:
    problems.append(p.stderr.decode().strip())

readme = open('README.md', encoding='utf-8').read()
for cmd in ['bash tools/install-deps.sh && make demo', 'bash tools/install-deps.sh && make test']:
    if cmd not in readme:
        problems.append('README.md: the command "%s" is gone (.ci/run and users depend on it)' % cmd)

# ---- the blocks of README.md ------------------------------------------------------
def blocks(text):
    """(line, lang, body, marks): marks are the HTML comments just above the fence."""
    out, lines, i = [], text.split('\n'), 0
    comments = []  # (kind, value) of the comments since the last non-comment line
    prev_blank = True
    while i < len(lines):
        line = lines[i]
        m = re.match(r'```(\S*)\s*$', line)
        if m:
            start, lang, body = i + 1, m.group(1), []
            i += 1
            while i < len(lines) and not lines[i].startswith('```'):
                body.append(lines[i]); i += 1
            if i == len(lines):
                problems.append('README.md:%d: a block that never ends' % start)
            out.append((start, lang, '\n'.join(body) + '\n', dict(comments)))
            comments, prev_blank = [], False
            i += 1
            continue
        c = re.match(r'<!--\s*(norun|output):?(.*)', line)
        if c:
            value = c.group(2)
            while '-->' not in value and i + 1 < len(lines):
                i += 1; value += '\n' + lines[i]
            comments.append((c.group(1), value.split('-->')[0].strip()))
        elif line.strip():
            comments = []
            if prev_blank and re.match(r'( {4}|\t)', line):
                problems.append('README.md:%d: an indented code block (fence it with its language)' % (i + 1))
        prev_blank = not line.strip()
        i += 1
    return out

LANGS = {'c', 'csharp', 'java', 'go', 'python', 'sh', 'text'}
tmp = tempfile.mkdtemp(prefix='check_readme.')
atexit.register(shutil.rmtree, tmp, True)
env0 = dict(os.environ)
env0.pop('LD_LIBRARY_PATH', None)
bdir = os.path.join(root, build)

def run(cmd, cwd, env=None, timeout=120):
    p = subprocess.run(cmd, cwd=cwd, env=env or env0, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    return p.returncode, p.stdout.decode('utf-8', 'replace')

def program(lang, body, d):
    """Builds the block's program in d and returns the command that runs it (and env)."""
    if lang == 'c':
        open(d + '/hello.c', 'w').write(body)
        rc, out = run(['cc', '-Wall', '-Werror', '-I', root + '/include', 'hello.c', '-o', 'hello',
                       '-L' + bdir + '/lib', '-ltpurt', '-Wl,-rpath,' + bdir + '/lib'], d)
        return rc, out, ['./hello'], env0
    if lang == 'csharp':
        cs = bdir + '/bindings/csharp'
        open(d + '/Program.cs', 'w').write(body)
        rc, out = run(['mcs', '-nologo', '-r:' + cs + '/Tpurt.dll', 'Program.cs'], d)
        return rc, out, ['mono', 'Program.exe'], dict(env0, MONO_PATH=cs)
    if lang == 'java':
        m = re.search(r'public\s+(?:final\s+)?class\s+(\w+)', body)
        if not m:
            return 1, 'no public class', None, None
        jar = bdir + '/bindings/java/tpurt.jar'
        open('%s/%s.java' % (d, m.group(1)), 'w').write(body)
        rc, out = run(['javac', '-nowarn', '-cp', jar, m.group(1) + '.java'], d)
        # the jar alone: its JNI library unpacks from it
        return rc, out, ['java', '-cp', jar + ':.', m.group(1)], env0
    if lang == 'go':
        go = bdir + '/bindings/go'
        open(d + '/main.go', 'w').write(body)
        open(d + '/go.mod', 'w').write('module example.com/hello\n\ngo 1.19\n\nrequire tpurt.dev/go/tpurt v0.0.0\n\n'
                                       'replace tpurt.dev/go/tpurt => %s/tpurt\n' % go)
        genv = dict(env0, GOPROXY='off', GOFLAGS='-mod=mod', GO111MODULE='on', GOTOOLCHAIN='local',
                    GOCACHE=go + '/cache', GOPATH=go + '/gopath')
        rc, out = run(['go', 'build', '-o', 'hello', '.'], d, genv, timeout=300)
        return rc, out, ['./hello'], env0
    if lang == 'python':
        open(d + '/hello.py', 'w').write(body)
        return 0, '', ['python3', 'hello.py'], dict(env0, PYTHONPATH=bdir + '/bindings/python')
    if lang == 'sh':
        open(d + '/block.sh', 'w').write('set -euo pipefail\n' + body)
        return 0, '', ['bash', d + '/block.sh'], env0

ran = skipped = 0
for line, lang, body, marks in blocks(readme):
    where = 'README.md:%d (```%s)' % (line, lang)
    if lang not in LANGS:
        problems.append('%s: a block says no language this check knows (%s)' % (where, ', '.join(sorted(LANGS))))
        continue
    if lang == 'text':
        continue
    if 'norun' in marks:
        if not marks['norun']:
            problems.append('%s: <!-- norun --> without a reason' % where)
        skipped += 1
        continue
    if lang != 'sh' and 'output' not in marks:
        problems.append('%s: a program block without <!-- output: ... --> (or <!-- norun: why -->)' % where)
        continue
    if sanitize:
        continue
    d = tempfile.mkdtemp(dir=tmp)
    try:
        rc, out, cmd, env = program(lang, body, d)
        if rc != 0:
            problems.append('%s: does not build:\n%s' % (where, out)); continue
        rc, out = run(cmd, root if lang == 'sh' else d, env)
    except subprocess.TimeoutExpired as e:
        problems.append('%s: ran out of time (%s)' % (where, ' '.join(e.cmd))); continue
    ran += 1
    if rc != 0:
        problems.append('%s: exited %d:\n%s' % (where, rc, out)); continue
    if 'output' in marks and out.strip() != marks['output'].strip():
        problems.append('%s: printed\n%s\nnot\n%s' % (where, out.strip(), marks['output'].strip()))

# The C# snippet of bindings/csharp/README.md (its first block), as its README says.
if not sanitize:
    text = open('bindings/csharp/README.md', encoding='utf-8').read()
    m = re.search(r'^```csharp\n(.*?)^```$', text, re.S | re.M)
    if not m:
        problems.append('bindings/csharp/README.md: no csharp block')
    else:
        d = tempfile.mkdtemp(dir=tmp)
        try:
            rc, out, cmd, env = program('csharp', m.group(1), d)
            if rc == 0:
                rc, out = run(cmd, d, env)
        except subprocess.TimeoutExpired:
            rc, out = -1, 'ran out of time'
        if rc != 0 or out.strip() != '28 8':
            problems.append('bindings/csharp/README.md: its C# snippet (exit %d) printed\n%s\nnot 28 8' % (rc, out.strip()))
        else:
            ran += 1
for p in problems:
    print('check_readme: ' + p, file=sys.stderr)
if problems:
    print('check_readme: %d problems' % len(problems), file=sys.stderr)
    sys.exit(1)
print('check_readme: %d links of %d documents resolve; %d code blocks ran as written, %d marked norun%s'
      % (links, len(docs), ran, skipped, ' (blocks not run under SANITIZE)' if sanitize else ''))
PY
