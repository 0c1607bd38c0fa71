import { isIPv6 } from 'node:net';

/**
 * A guessing brake for the built-in sign-in, per party. Wrong passwords are counted per client address and name
 * tried, and per client address: past PER_NAME failures in WINDOW_MS that address may not try that name again,
 * past PER_ADDRESS no name at all, until the window moves on. Nobody else is held back: another address, or the
 * same address with another name, signs in as before, so a forwarded link cannot be used to lock reviewers out.
 * Guessing also needs a valid link (they travel in the digest), and each try costs an scrypt on users files.
 */
export class SignInLimits {
  static readonly PER_NAME = 10;
  static readonly PER_ADDRESS = 30;
  static readonly WINDOW_MS = 10 * 60_000;
  /** Counts kept at most: a flood of addresses must not grow memory without end (the oldest go first). */
  static readonly MAX_KEYS = 10_000;
  private readonly failures = new Map<string, number[]>();

  /** Whether this address may not try this name now. */
  blocked(client: string, user: string, at: number): boolean {
    return this.count(nameKey(client, user), at) >= SignInLimits.PER_NAME || this.count(addressKey(client), at) >= SignInLimits.PER_ADDRESS;
  }

  fail(client: string, user: string, at: number): void {
    for (const key of [nameKey(client, user), addressKey(client)]) {
      const times = this.failures.get(key) ?? [];
      this.failures.delete(key); // re-inserted last: the map's order is the order of last failure
      this.failures.set(key, [...times.filter((t) => at - t < SignInLimits.WINDOW_MS), at]);
    }
    while (this.failures.size > SignInLimits.MAX_KEYS) this.failures.delete(this.failures.keys().next().value!);
  }

  private count(key: string, at: number): number {
    return (this.failures.get(key) ?? []).filter((t) => at - t < SignInLimits.WINDOW_MS).length;
  }
}

const nameKey = (client: string, user: string) => JSON.stringify([client, user]);
const addressKey = (client: string) => JSON.stringify([client]);

/**
 * Who is asking, for the limits: an IPv4 address (also when IPv4-mapped), or an IPv6 address's /64, since one
 * host is given a whole /64 and could otherwise try from a new address each time.
 */
export function clientKey(address: string): string {
  const a = address.trim().toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (mapped) return mapped[1]!;
  if (!isIPv6(a)) return a;
  const [head = '', tail = ''] = a.split('::');
  const left = head === '' ? [] : head.split(':');
  const right = tail === '' ? [] : tail.split(':');
  const groups = a.includes('::') ? [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right] : left;
  return `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, '')).join(':')}::/64`;
}
