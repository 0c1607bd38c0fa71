import { textFinder } from '../text/needles.js';
import { scrollAll, type Mem0Point, type PointStore } from '../vectors/contract.js';
import { asciiLower } from '../text/needles.js';

// What erase shares between layouts: a sweep of vector collections for points still holding erased text.

/**
 * Points that still carry erased text after the deletes by id — copies written around the store, orphans — in
 * every collection: any payload whose JSON holds one of the texts (or, for --subject, the subject in any case).
 * `keep` is asked only of a point that holds one (a store on a database answers it asynchronously). `dryRun`: the
 * points counted, none deleted, but those in `dryRun.gone` (deleted by the steps before the sweep in the real run).
 */
export async function sweepCollections(
  points: PointStore, collections: readonly string[], ids: ReadonlySet<string>, texts: Iterable<string>, subject: string | undefined, pageSize: number,
  keep: (p: Mem0Point) => boolean | Promise<boolean> = () => false, dryRun?: { gone: ReadonlySet<string> },
): Promise<number> {
  const holdsText = textFinder([...new Set(texts)]);
  const folded = subject === undefined ? undefined : asciiLower(subject);
  const existing = new Set(await points.collections());
  let n = 0;
  for (const c of new Set(collections)) {
    if (!existing.has(c)) continue;
    const doomed: string[] = [];
    for await (const page of scrollAll(points, c, pageSize, true)) {
      for (const p of page) {
        const values = payloadStrings(p.payload);
        const holds = ids.has(p.id) || values.some((v) => holdsText(v) || (folded !== undefined && asciiLower(v).includes(folded)));
        if (holds && !dryRun?.gone.has(p.id) && !(await keep(p))) doomed.push(p.id);
      }
    }
    if (!dryRun) await points.delete(c, doomed);
    n += doomed.length;
  }
  return n;
}
/** Every string value in a payload, nested ones included; never the keys (`--subject user` must not match `user_id`). */
export function payloadStrings(v: unknown, out: string[] = []): string[] {
  // A stack, not recursion: a payload is the agent's data, and can nest deeper than the call stack goes.
  const stack: unknown[] = [v];
  while (stack.length > 0) {
    const x = stack.pop();
    if (typeof x === 'string') out.push(x);
    else if (x && typeof x === 'object') {
      const inner = Array.isArray(x) ? x : Object.values(x);
      for (let i = inner.length - 1; i >= 0; i--) stack.push(inner[i]);
    }
  }
  return out;
}
