#!/usr/bin/env python3
"""Draws docs/standing.svg, the README's plot: busbw at 16 MiB of tasks over shared memory
and over TCP beside Open MPI and Gloo, from the rows of docs/PERFORMANCE.md's table
"Against Open MPI and Gloo", so that the plot and the table cannot disagree.

usage: python3 bench/plot_standing.py [--check]
  --check  writes nothing; exits 1 when docs/standing.svg is not what the table draws
           (tests/check_readme.sh runs it)
Plain SVG from the standard library: no plotting package to install."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, 'docs', 'PERFORMANCE.md')
OUT = os.path.join(ROOT, 'docs', 'standing.svg')
# (section of the table's "where" column, column, legend, colour); dashed: the peers
BARS = [
    ('tasks over shared memory', 'Open MPI', 'Open MPI, shared memory', '#1f77b4', True),
    ('tasks over shared memory', 'tpurt', 'tpurt tasks, shared memory', '#2ca02c', False),
    ('tasks over TCP', 'Open MPI', 'Open MPI, TCP', '#ff7f0e', True),
    ('tasks over TCP', 'Gloo (ring)', 'Gloo ring, TCP', '#7f7f7f', True),
    ('tasks over TCP', 'tpurt', 'tpurt tasks, TCP', '#d62728', False),
]
NS = (2, 4, 8)


def read_table():
    """{(section, n, column): GB/s} of the table's "busbw at 16 MiB" rows."""
    text = open(TABLE, encoding='utf-8').read()
    part = text.split('\n## Against Open MPI and Gloo\n', 1)
    if len(part) != 2:
        sys.exit('plot_standing: no "## Against Open MPI and Gloo" in docs/PERFORMANCE.md')
    rows = [l for l in part[1].split('\n## ')[0].split('\n') if l.startswith('|')]
    head = [c.strip() for c in rows[0].strip('|').split('|')]
    values, section = {}, ''
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip('|').split('|')]
        section = re.sub(r'\s*\(.*', '', cells[0]) or section
        if cells[2] != 'busbw at 16 MiB':
            continue
        for name, cell in zip(head, cells):
            m = re.fullmatch(r'([0-9.]+) GB/s', cell)
            if m:
                values[(section, int(cells[1]), name)] = float(m.group(1))
    return values


def svg(values):
    w, h, left, top, bottom = 640, 330, 56, 40, 60
    plot_h = h - top - bottom
    top_value = max(values.get((s, n, c), 0) for s, c, *_ in BARS for n in NS)
    scale = plot_h / (int(top_value) + 1)
    group_w = (w - left - 20) / len(NS)
    bar_w = (group_w - 24) / len(BARS)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="12">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="14">Float32 all-reduce of 16 MiB: busbw in GB/s, '
           'higher is better</text>' % left]
    for g in range(int(top_value) + 2):
        y = top + plot_h - g * scale
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (left, y, w - 20, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (left - 6, y + 4, g))
    for i, n in enumerate(NS):
        x0 = left + i * group_w + 12
        for j, (section, column, _, colour, peer) in enumerate(BARS):
            v = values.get((section, n, column))
            if v is None:
                continue
            x, bh = x0 + j * bar_w, v * scale
            dash = ' stroke="%s" stroke-dasharray="4 2" fill-opacity="0.45"' % colour if peer else ''
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"%s/>'
                       % (x, top + plot_h - bh, bar_w - 2, bh, colour, dash))
            out.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%.2f</text>'
                       % (x + bar_w / 2 - 1, top + plot_h - bh - 3, v))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d tasks</text>'
                   % (x0 + (group_w - 24) / 2, top + plot_h + 18, n))
    for j, (_, _, legend, colour, peer) in enumerate(BARS):
        x, y = left + (j % 3) * 190, h - 22 + (j // 3) * 16 - 8
        out.append('<rect x="%d" y="%d" width="12" height="10" fill="%s"%s/>'
                   % (x, y - 9, colour, ' fill-opacity="0.45"' if peer else ''))
        out.append('<text x="%d" y="%d">%s</text>' % (x + 16, y, legend))
    out.append('</svg>')
    return '\n'.join(out) + '\n'


def main():
    values = read_table()
    missing = [(s, n, c) for s, c, *_ in BARS for n in NS if (s, n, c) not in values]
    drawn = svg(values)
    if '--check' in sys.argv[1:]:
        current = open(OUT, encoding='utf-8').read() if os.path.exists(OUT) else ''
        if current != drawn:
            print('plot_standing: docs/standing.svg is not what docs/PERFORMANCE.md\'s table draws '
                  '(python3 bench/plot_standing.py redraws it)', file=sys.stderr)
            return 1
        return 0
    open(OUT, 'w', encoding='utf-8').write(drawn)
    print('plot_standing: wrote docs/standing.svg' +
          ('; no figure for %s' % missing if missing else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
