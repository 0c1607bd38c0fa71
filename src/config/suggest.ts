/**
 * "did you mean `heartbeatMs`?" for a key the config does not know: the known keys at that place come from the
 * schema itself (walked through its wrappers: optional, default, record values, array items, unions), and the
 * nearest one is offered when it is near enough to be a slip (a letter's case, one or two letters wrong or swapped).
 */

/** The zod internals this reads (zod 4's `_zod.def`): only the shape of the tree, never a value. */
interface Def {
  type?: string;
  shape?: Record<string, Node>;
  valueType?: Node;
  innerType?: Node;
  element?: Node;
  in?: Node;
  out?: Node;
  options?: Node[];
  left?: Node;
  right?: Node;
  getter?: () => Node;
}
interface Node {
  _zod?: { def?: Def };
}

const defOf = (n: Node | undefined): Def => n?._zod?.def ?? {};

/** The object schemas a value at `path` can be validated by (several under a union). */
function objectsAt(root: Node, path: PropertyKey[]): Node[] {
  let at: Node[] = [root];
  for (const key of path) at = at.flatMap((n) => objects(n)).flatMap((n) => child(n, key));
  return at.flatMap((n) => objects(n));
}

/** `n` unwrapped down to object schemas. */
function objects(n: Node, depth = 0): Node[] {
  const d = defOf(n);
  if (depth > 20) return [];
  switch (d.type) {
    case 'object':
      return [n];
    case 'optional': case 'nullable': case 'default': case 'prefault': case 'readonly': case 'catch': case 'nonoptional':
      return d.innerType ? objects(d.innerType, depth + 1) : [];
    case 'pipe':
      return [...(d.in ? objects(d.in, depth + 1) : []), ...(d.out ? objects(d.out, depth + 1) : [])];
    case 'union':
      return (d.options ?? []).flatMap((o) => objects(o, depth + 1));
    case 'intersection':
      return [...(d.left ? objects(d.left, depth + 1) : []), ...(d.right ? objects(d.right, depth + 1) : [])];
    case 'lazy':
      return d.getter ? objects(d.getter(), depth + 1) : [];
    case 'record': case 'array':
      return [n];
    default:
      return [];
  }
}

function child(n: Node, key: PropertyKey): Node[] {
  const d = defOf(n);
  if (d.type === 'object') return d.shape && typeof key === 'string' && Object.hasOwn(d.shape, key) ? [d.shape[key]!] : [];
  if (d.type === 'record') return d.valueType ? [d.valueType] : [];
  if (d.type === 'array') return d.element ? [d.element] : [];
  return [];
}

/** Every key an object at `path` may hold, by the schema. */
export function knownKeys(schema: unknown, path: PropertyKey[]): string[] {
  const keys = new Set<string>();
  for (const n of objectsAt(schema as Node, path)) for (const k of Object.keys(defOf(n).shape ?? {})) keys.add(k);
  return [...keys];
}

/** Optimal string alignment distance: insertions, deletions, substitutions and swaps of two neighbours. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/** The known key nearest to `key`, when near enough to be a slip of it; else undefined. */
export function nearestKey(key: string, known: readonly string[]): string | undefined {
  let best: { key: string; distance: number } | undefined;
  for (const k of known) {
    if (k === key) continue;
    // The case of a letter costs nothing but a little: `heartbeatMS` is `heartbeatMs`.
    const distance = k.toLowerCase() === key.toLowerCase() ? 0.5 : editDistance(key.toLowerCase(), k.toLowerCase());
    if (!best || distance < best.distance) best = { key: k, distance };
  }
  if (!best) return undefined;
  const limit = Math.max(1, Math.floor(Math.min(key.length, best.key.length) / 4));
  return best.distance <= limit ? best.key : undefined;
}

/** `(did you mean "heartbeatMs"?)` for each unknown key that has a near known one, else the keys as before. */
export function unknownKeysHint(schema: unknown, path: PropertyKey[], keys: readonly string[]): string {
  const known = knownKeys(schema, path);
  const hints = keys.map((k) => {
    const near = nearestKey(k, known);
    const mean = near === undefined ? undefined : `did you mean ${JSON.stringify(near)}?`;
    return mean === undefined ? k : keys.length === 1 ? mean : `${k}: ${mean}`;
  });
  return ` (${hints.join('; ')})`;
}
