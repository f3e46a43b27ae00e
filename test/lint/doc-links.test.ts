import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');

const tracked = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' }).split('\n').filter(Boolean);

/** A heading's anchor as GitHub makes it: lower case, punctuation other than `-` and `_` dropped, spaces to `-`. */
const slug = (heading: string): string => heading.trim().toLowerCase().replace(/[^\p{L}\p{N}_\- ]/gu, '').replaceAll(' ', '-');

/** The anchors of a Markdown file's headings (a repeated heading's get -1, -2, …). */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6}\s+(.*)$/.exec(line);
    if (!heading) continue;
    const base = slug(heading[1]!);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

const anchors = new Map(tracked.filter((f) => f.endsWith('.md')).map((f) => [f, anchorsOf(readFileSync(join(ROOT, f), 'utf8'))]));

/** Every link to a Markdown heading (a document path, `#`, an anchor) that a tracked source or document holds, with where. */
function links(): { from: string; doc: string; anchor: string }[] {
  const out = [];
  for (const from of tracked.filter((f) => /\.(ts|md|ya?ml|lua|sh|c|tpl)$/.test(f))) {
    for (const [, doc, anchor] of readFileSync(join(ROOT, from), 'utf8').matchAll(/([\w./-]+\.md)#([\w-]+)/g)) out.push({ from, doc: doc!, anchor: anchor! });
  }
  return out;
}

describe("the comments' and documents' links into the project's own docs", () => {
  it('each names a document of this repository and one of its headings', () => {
    const found = links();
    expect(found.length).toBeGreaterThan(100);
    // A link between documents may be relative to the one it is in; a comment names paths from the root.
    const resolves = ({ from, doc, anchor }: (typeof found)[number]): boolean =>
      [doc, normalize(join(dirname(from), doc))].some((path) => anchors.get(path)?.has(anchor));
    const broken = found.filter((link) => !resolves(link)).map(({ from, doc, anchor }) => `${from}: ${doc}#${anchor}`);
    expect(broken).toEqual([]);
  });

  it("each Markdown link to the project's own files names one that exists, and a heading of it or of its own document", () => {
    const paths = new Set(tracked.flatMap((f) => f.split('/').map((_, i, parts) => parts.slice(0, i + 1).join('/'))));
    const found: { from: string; target: string }[] = [];
    for (const from of tracked.filter((f) => f.endsWith('.md'))) {
      for (const [, target] of readFileSync(join(ROOT, from), 'utf8').matchAll(/\]\(([^)\s]+)\)/g)) {
        if (!/^[a-z][a-z+.-]*:/.test(target!)) found.push({ from, target: target! });
      }
    }
    expect(found.length).toBeGreaterThan(50);
    const resolves = ({ from, target }: (typeof found)[number]): boolean => {
      const [path = '', anchor] = target.split('#');
      const doc = path === '' ? from : normalize(join(dirname(from), path)).replace(/\/$/, '');
      if (!paths.has(doc)) return false;
      return anchor === undefined || (anchors.get(doc)?.has(anchor) ?? false);
    };
    expect(found.filter((link) => !resolves(link)).map(({ from, target }) => `${from}: ${target}`)).toEqual([]);
  });

  it('reads anchors as GitHub makes them', () => {
    expect([...anchorsOf('# The sidecar (`gw-sidecar`)\n## Soak (`npm run soak`)\n```\n# not a heading\n```\n## Soak (`npm run soak`)')]).toEqual([
      'the-sidecar-gw-sidecar',
      'soak-npm-run-soak',
      'soak-npm-run-soak-1',
    ]);
  });
});
