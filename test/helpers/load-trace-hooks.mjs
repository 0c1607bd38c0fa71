// Module hooks of load-trace.mjs (they run on node's hooks thread): every ESM module loaded, as a path.
import { appendFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

let out;
export function initialize(data) {
  out = data.out;
}
export async function load(url, context, next) {
  const result = await next(url, context);
  if (url.startsWith('file:')) appendFileSync(out, `${fileURLToPath(url)}\n`);
  return result;
}
