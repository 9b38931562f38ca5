#!/usr/bin/env bash
# The rules of docs/ABI.md that the public headers' declarations show (tests/contracts/
# ABI.md.tsv names this script beside them):
# - every TPU_API function returns tpu_status, except the few that only name a value
#   (tpu_status_name, tpu_last_error, tpu_version, tpu_clear_last_error);
# - every out-array is (T *out, size_t capacity, size_t *count): a `size_t capacity`
#   parameter follows a pointer and precedes `size_t *count`;
# - every collective of tpurt/collectives.h takes a `const tpu_collective_options *`
#   last (NULL = defaults);
# - every options struct (tpu_X_options) starts with `size_t struct_size` and has its
#   TPU_X_OPTIONS_INIT macro and tpu_X_options_init(o, struct_size) function;
# - no options field is declared with an enum type (they are `int`);
# - topology and device-assignment handles are immutable: only tpu_X_release takes
#   one that is not const;
# - within a major version the ABI only grows: every line of tests/contracts/abi-1.txt
#   (each function's declaration, parameter names dropped, and each enum value of an
#   earlier release) is still in the headers. `bash tests/check_abi_signatures.sh
#   --print` prints the current lines: at a release, add the new ones to that file
#   (a parameter renamed is not a change: names are dropped).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
exec python3 - "$@" <<'PY'
import glob, re, sys

src = ''
for path in sorted(glob.glob('include/tpurt/*.h')):
    src += open(path, encoding='utf-8').read() + '\n'
code = re.sub(r'/\*.*?\*/', ' ', src, flags=re.S)
code = re.sub(r'//[^\n]*', ' ', code)
problems = []

decls = {}
for m in re.finditer(r'\bTPU_API\s+([^;{}()]*?)\b(tpu_\w+)\s*\(([^;{}]*?)\)\s*;', code):
    ret, name, params = ' '.join(m.group(1).split()), m.group(2), ' '.join(m.group(3).split())
    decls[name] = (ret, [p.strip() for p in params.split(',')] if params and params != 'void' else [])
if len(decls) < 50:
    problems.append('found only %d TPU_API declarations: the parser is broken' % len(decls))

NAME_ONLY = {'tpu_status_name', 'tpu_last_error', 'tpu_version', 'tpu_clear_last_error'}
for name, (ret, params) in sorted(decls.items()):
    if name not in NAME_ONLY and ret != 'tpu_status':
        problems.append('%s returns %s, not tpu_status' % (name, ret))
    for i, p in enumerate(params):
        if re.fullmatch(r'size_t\s+capacity', p):
            before = params[i - 1] if i > 0 else ''
            after = params[i + 1] if i + 1 < len(params) else ''
            if '*' not in before or not re.fullmatch(r'size_t\s*\*\s*count', after):
                problems.append('%s: capacity not in (T *out, size_t capacity, size_t *count): %s'
                                % (name, ', '.join(params)))

# Topology and device-assignment handles are immutable: only their releasers take one
# that is not const (a T ** is an out-parameter).
for name, (ret, params) in sorted(decls.items()):
    for p in params:
        if (re.match(r'(tpu_topology|tpu_device_assignment)\s*\*\s*\w*$', p)
                and not name.endswith('_release')):
            problems.append('%s takes a mutable %s' % (name, p))

coll = open('include/tpurt/collectives.h', encoding='utf-8').read()
coll = re.sub(r'/\*.*?\*/', ' ', coll, flags=re.S)
collectives = [n for n in re.findall(r'\bTPU_API\s+tpu_status\s+(tpu_\w+)\s*\(\s*tpu_replica_context\b', coll)
               if not n.startswith('tpu_bfloat16_scope_')]
if len(collectives) < 8:
    problems.append('found only %d collectives in collectives.h' % len(collectives))
for name in collectives:
    params = decls[name][1]
    if not params or not re.fullmatch(r'const\s+tpu_collective_options\s*\*\s*\w+', params[-1]):
        problems.append('%s: the last parameter is not a const tpu_collective_options *' % name)

enums = set(re.findall(r'typedef\s+TPU_ENUM\((\w+)\)', code))
structs = re.findall(r'typedef\s+struct\s+(tpu_\w+_options)\s*\{(.*?)\}\s*\1\s*;', code, re.S)
if len(structs) < 3:
    problems.append('found only %d options structs' % len(structs))
for name, body in structs:
    fields = [f.strip() for f in body.split(';') if f.strip()]
    if not fields or not re.fullmatch(r'size_t\s+struct_size', fields[0]):
        problems.append('%s: the first field is not size_t struct_size' % name)
    for f in fields:
        t = f.split()[0] if f.split()[0] != 'const' else f.split()[1]
        if t in enums:
            problems.append('%s: field "%s" has an enum type (declare it int)' % (name, f))
    stem = name[len('tpu_'):-len('_options')]
    macro = 'TPU_%s_OPTIONS_INIT' % stem.upper()
    if not re.search(r'#define\s+%s\b' % macro, code):
        problems.append('%s: no %s macro' % (name, macro))
    init = decls.get('tpu_%s_options_init' % stem)
    if not init or len(init[1]) != 2 or not re.fullmatch(r'size_t\s+struct_size', init[1][1]):
        problems.append('%s: no tpu_%s_options_init(options, size_t struct_size)' % (name, stem))

def param_type(p):
    """The parameter's type: its name (the last word, when a type comes before it) dropped."""
    tokens = p.replace('*', ' * ').split()
    typed = [t for t in tokens[:-1] if t not in ('const', 'volatile', '*')]
    if len(tokens) > 1 and typed and re.fullmatch(r'\w+', tokens[-1]):
        tokens = tokens[:-1]
    return re.sub(r'\* (?=\*)', '*', ' '.join(tokens)).replace(' * ', ' *').replace('* ', '*')

current = set()
for name, (ret, params) in decls.items():
    current.add('%s %s(%s)' % (ret, name, ', '.join(param_type(p) for p in params) or 'void'))
for body in re.findall(r'typedef\s+TPU_ENUM\(\w+\)\s*\{(.*?)\}', code, re.S):
    for n, v in re.findall(r'\b(TPU_\w+)\s*=\s*(-?\d+)', body):
        current.add('enum %s = %s' % (n, v))
for n, v in re.findall(r'\bXX\((\w+), (-?\d+),', code):  # TPU_STATUS_MAP, TPU_DTYPE_MAP
    current.add('enum TPU_%s = %s' % (n, v))
if '--print' in sys.argv[1:]:
    print('\n'.join(sorted(current)))
    sys.exit(0)
baseline = 'tests/contracts/abi-1.txt'
for line in open(baseline, encoding='utf-8'):
    line = line.strip()
    if line and not line.startswith('#') and line not in current:
        problems.append('%s: no longer in the headers (a major release may change it, a minor one only adds): %s'
                        % (baseline, line))

for p in problems:
    print('check_abi_signatures: ' + p, file=sys.stderr)
print('check_abi_signatures: %d functions, %d collectives, %d options structs, %d problems'
      % (len(decls), len(collectives), len(structs), len(problems)))
sys.exit(1 if problems else 0)
PY
