import { randomBytes } from 'node:crypto';
import type { Instant } from '../time/instants.js';

/**
 * Signed-in sessions, in memory (a restart signs everyone out; a digest link signs them in again). A session is
 * bound to one store and one person. Every form carries a one-time nonce issued by the session: a POST whose
 * nonce this session did not issue is refused, and one already used is a replay that changes nothing.
 */
export interface Session {
  id: string;
  store: string;
  user: string;
  expires: Instant;
  issued: Set<string>;
  used: Set<string>;
}

export type NonceCheck = 'ok' | 'replayed' | 'unknown';

const MAX_NONCES = 2000;
const MAX_SESSIONS = 10_000;
const random = () => randomBytes(24).toString('base64url');

export class Sessions {
  private readonly byId = new Map<string, Session>();

  create(store: string, user: string, expires: Instant, now: Instant): Session {
    this.sweep(now);
    const s: Session = { id: random(), store, user, expires, issued: new Set(), used: new Set() };
    this.byId.set(s.id, s);
    return s;
  }

  /** The live session with this id, or undefined (unknown or expired: the cookie opens nothing). */
  get(id: string | undefined, now: Instant): Session | undefined {
    if (!id) return undefined;
    const s = this.byId.get(id);
    if (!s) return undefined;
    if (now >= s.expires) {
      this.byId.delete(id);
      return undefined;
    }
    return s;
  }

  end(id: string): void {
    this.byId.delete(id);
  }

  /** A nonce for one form; the oldest unused ones are forgotten past MAX_NONCES. */
  issue(s: Session): string {
    const n = random();
    s.issued.add(n);
    if (s.issued.size > MAX_NONCES) s.issued.delete(s.issued.values().next().value!);
    return n;
  }

  /** Spend a nonce: only a POST holding one this session issued and nobody spent goes on. */
  spend(s: Session, nonce: string): NonceCheck {
    if (s.used.has(nonce)) return 'replayed';
    if (!s.issued.has(nonce)) return 'unknown';
    s.issued.delete(nonce);
    s.used.add(nonce);
    if (s.used.size > MAX_NONCES) s.used.delete(s.used.values().next().value!);
    return 'ok';
  }

  private sweep(now: Instant): void {
    for (const [id, s] of this.byId) if (now >= s.expires) this.byId.delete(id);
    // A flood of sign-ins must not grow memory without end: the oldest sessions go first.
    while (this.byId.size >= MAX_SESSIONS) this.byId.delete(this.byId.keys().next().value!);
  }
}
