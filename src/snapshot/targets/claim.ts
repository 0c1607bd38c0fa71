// memory-warden's claim on a snapshot folder of a target: written first by an upload, deleted last by a delete, so a
// folder whose manifest is gone or not yet there (a kill mid-way) is still proven memory-warden's, and only such a
// folder is removed by cleanup or erase. Bound to the store and snapshot name, and MACed with the target's key.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { readAll } from './remote-manifest.js';
import { targetKeyId } from './auth.js';
import { CLAIM_KEY, type SnapshotTarget } from './types.js';

export const CLAIM_FORMAT = 'memory-warden-claim/1';
const CLAIM_MAX_BYTES = 4096;

interface Claim {
  format: typeof CLAIM_FORMAT;
  store: string;
  snapshot: string;
  /** HMAC-SHA256 under the target's key (absent on a target without authKeyFile). */
  auth?: { keyId: string; mac: string };
}

const mac = (key: Buffer, store: string, snapshot: string) => createHmac('sha256', key).update(`${CLAIM_FORMAT}\n${store}\n${snapshot}\n`).digest();

/** The claim.json an upload writes before anything else of `snapshot`. */
export function claimBody(key: Buffer | null, store: string, snapshot: string): Buffer {
  const claim: Claim = { format: CLAIM_FORMAT, store, snapshot, ...(key ? { auth: { keyId: targetKeyId(key), mac: mac(key, store, snapshot).toString('hex') } } : {}) };
  return Buffer.from(JSON.stringify(claim) + '\n');
}

/**
 * Why the folder's claim.json does not prove it memory-warden's (absent, unreadable, another store's or snapshot's,
 * no MAC or a wrong one where the target has a key), or undefined when it does. On a target without a key a claim
 * proves as much as a manifest there does: whoever can write the target could have written it.
 */
export async function claimProblem(storage: SnapshotTarget, key: Buffer | null, store: string, snapshot: string): Promise<string | undefined> {
  let c: Partial<Claim>;
  try {
    if (!(await storage.keys(snapshot)).includes(CLAIM_KEY)) return `no ${CLAIM_KEY}`;
    c = JSON.parse((await readAll(await storage.get(snapshot, CLAIM_KEY, undefined, CLAIM_MAX_BYTES), CLAIM_MAX_BYTES)).toString('utf8')) as Partial<Claim>;
  } catch (err) {
    return `${CLAIM_KEY} cannot be read (${(err as Error).message})`;
  }
  if (!c || c.format !== CLAIM_FORMAT) return `${CLAIM_KEY} is not memory-warden's claim`;
  if (c.store !== store || c.snapshot !== snapshot) return `${CLAIM_KEY} claims ${JSON.stringify(c.store)}/${JSON.stringify(c.snapshot)}, not ${store}/${snapshot}`;
  if (!key) return undefined;
  if (typeof c.auth?.mac !== 'string' || !/^[0-9a-f]{64}$/.test(c.auth.mac)) return `${CLAIM_KEY} carries no MAC, and the target has authKeyFile set`;
  if (!timingSafeEqual(Buffer.from(c.auth.mac, 'hex'), mac(key, store, snapshot))) return `${CLAIM_KEY}'s MAC does not verify with the target's key`;
  return undefined;
}
