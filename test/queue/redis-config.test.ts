// The redis config section's deployment rules: Sentinel needs both sentinels and name, Cluster a {hash-tagged}
// prefix and no sentinels; each refusal names the field that has to change.
import { describe, expect, it } from 'vitest';
import { claimDurability, hashTag, redisSchema } from '../../src/queue/config.js';

const node = { host: '127.0.0.1', port: 7000 };
const issue = (input: unknown) => {
  const r = redisSchema.safeParse(input);
  return r.success ? null : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
};

describe('redis config: deployments', () => {
  it('names the missing half of a Sentinel setting', () => {
    expect(issue({ sentinels: [node] })).toMatch(/^name: the master name/);
    expect(issue({ name: 'mymaster' })).toMatch(/^sentinels: the sentinels that watch master "mymaster"/);
    expect(issue({ sentinels: [node], name: 'mymaster' })).toBeNull();
  });

  it('refuses Sentinel and Cluster together, and a Cluster prefix with no hash tag', () => {
    expect(issue({ sentinels: [node], name: 'm', cluster: { nodes: [node] }, prefix: '{mw}' })).toMatch(/^cluster: either cluster or sentinels/);
    for (const prefix of ['memory-warden', '{}mw', 'mw{', 'mw}{', 'a{}b{c}']) {
      expect(issue({ cluster: { nodes: [node] }, prefix }), prefix).toMatch(/^prefix: .*no \{hash tag\}/);
    }
    for (const prefix of ['{mw}', 'mw-{fleet}', '{mw}:x', 'x}{y}']) expect(issue({ cluster: { nodes: [node] }, prefix }), prefix).toBeNull();
  });

  it("reads hash tags as CLUSTER KEYSLOT does: the first {…}, when not empty", () => {
    expect([hashTag('{a}b'), hashTag('x{a}{b}'), hashTag('{}a'), hashTag('a{b'), hashTag('x}{y}')]).toEqual(['a', 'a', undefined, undefined, 'y']);
  });

  it('waits for one replica behind Sentinel by default, none otherwise, as configured when set', () => {
    const parse = (v: unknown) => claimDurability(redisSchema.parse(v));
    expect(parse({})).toEqual({ replicas: 0, waitMs: 2000 });
    expect(parse({ sentinels: [node], name: 'm' })).toEqual({ replicas: 1, waitMs: 2000 });
    expect(parse({ sentinels: [node], name: 'm', claimReplicas: 2, claimWaitMs: 500 })).toEqual({ replicas: 2, waitMs: 500 });
  });
});
