import type { Config } from '../config/config.js';
import type { StoreSection } from './model.js';
import { DAY_MS, type Instant } from '../time/instants.js';
import { itemAnchor, reviewKey, signLink } from '../links/tokens.js';
import { idHoldsSecret } from './untrusted.js';

/**
 * The page link for one item of one store: `<review.url>/open?t=TOKEN#m-…`. The token is bound to the store and
 * the item and expires after review.tokenDays. Only the token and a derived anchor come from the item, never its text.
 */
export function reviewLink(config: Config, key: Buffer, store: string, item: string, now: Instant): string {
  const base = config.review.url!.replace(/\/+$/, '');
  const token = signLink(key, { store, item, expires: now + config.review.tokenDays * DAY_MS });
  return `${base}/open?t=${token}${item === '*' ? '' : `#${itemAnchor(item)}`}`;
}

/**
 * Give the digest's review items their page links when review.url is configured. Without a signing key the
 * digest keeps its shell commands (and says why in the log) rather than not going out.
 */
export function attachReviewLinks(section: StoreSection, config: Config, now: Instant, warn: (msg: string) => void): void {
  if (!config.review.url) return;
  let key: Buffer;
  try {
    key = reviewKey(config.review.secretEnv);
  } catch (err) {
    warn(`digest: no review links (${(err as Error).message})`);
    return;
  }
  // A token's payload is base64url JSON that anyone can read back: an id that holds what looks like a credential
  // is not put in it (nor in the commands, reviewCommands): its link opens the store's whole page.
  const item = (id: string) => (idHoldsSecret(id) ? '*' : id);
  for (const r of section.review.batch) r.link = reviewLink(config, key, section.name, item(r.id), now);
  for (const v of section.maintenance.awaitingPerson.shown) v.link = reviewLink(config, key, section.name, item(v.memoryId), now);
}
