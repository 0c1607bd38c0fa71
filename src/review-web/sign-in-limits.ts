import { isIPv6 } from 'node:net';

/**
 * A guessing brake for the built-in sign-in. Wrong passwords are counted per client address and account tried,
 * per client address, and per known user from anywhere: past PER_NAME failures in WINDOW_MS that address may not
 * try that account again, past PER_ADDRESS no account at all, and past PER_USER a known user of a users file is
 * not signed in from anywhere until the window moves on (guessing one person's password from many addresses).
 * The account is what the password belongs to: a users file's name; with a shared password the shared password,
 * whatever name is typed beside it (free text: a new name each try would otherwise be a fresh count).
 * Another address, or another account from the same address, is not held back by one address's failures, so a
 * forwarded link alone cannot lock reviewers out. Guessing also needs a valid link (they travel in the digest),
 * and each try costs an scrypt on users files.
 */
export class SignInLimits {
  static readonly PER_NAME = 10;
  static readonly PER_ADDRESS = 30;
  static readonly PER_USER = 50;
  static readonly WINDOW_MS = 10 * 60_000;
  /** Counts kept at most: a flood of addresses must not grow memory without end (the oldest go first). */
  static readonly MAX_KEYS = 10_000;
  private readonly failures = new Map<string, number[]>();

  /** `accountOf`: the account a typed name tries and whether it is a known user (the authenticator's). */
  constructor(private readonly accountOf: (user: string) => Account = (user) => ({ name: user, known: false })) {}

  /** Whether this address may not try this name now. */
  blocked(client: string, user: string, at: number): boolean {
    const account = this.accountOf(user);
    return (
      this.count(nameKey(client, account.name), at) >= SignInLimits.PER_NAME ||
      this.count(addressKey(client), at) >= SignInLimits.PER_ADDRESS ||
      (account.known && this.count(userKey(account.name), at) >= SignInLimits.PER_USER)
    );
  }

  fail(client: string, user: string, at: number): void {
    for (const key of this.keysOf(client, user)) {
      const times = this.failures.get(key) ?? [];
      this.failures.delete(key); // re-inserted last: the map's order is the order of last failure
      this.failures.set(key, [...times.filter((t) => at - t < SignInLimits.WINDOW_MS), at]);
    }
    while (this.failures.size > SignInLimits.MAX_KEYS) this.failures.delete(this.failures.keys().next().value!);
  }

  /** Takes back the failure `fail` counted at `at` for a try that turned out right. */
  forgive(client: string, user: string, at: number): void {
    for (const key of this.keysOf(client, user)) {
      const times = this.failures.get(key);
      const i = times?.lastIndexOf(at) ?? -1;
      if (i >= 0) times!.splice(i, 1);
      if (times?.length === 0) this.failures.delete(key);
    }
  }

  /** The counts a try of `user` from `client` adds to. */
  private keysOf(client: string, user: string): string[] {
    const account = this.accountOf(user);
    return [nameKey(client, account.name), addressKey(client), ...(account.known ? [userKey(account.name)] : [])];
  }

  private count(key: string, at: number): number {
    return (this.failures.get(key) ?? []).filter((t) => at - t < SignInLimits.WINDOW_MS).length;
  }
}

/** What a typed name signs in to: `name` is counted per address; a `known` user also from everywhere. */
export interface Account {
  name: string;
  known: boolean;
}

const nameKey = (client: string, user: string) => JSON.stringify([client, user]);
const addressKey = (client: string) => JSON.stringify([client]);
const userKey = (name: string) => JSON.stringify(['user', name]);

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
