import { describe, expect, it } from 'vitest';
import { validateConfig } from '../../src/config/config.js';
import { compileRule, compileRules, fillTree, judge, matchRule, type CompiledRule } from '../../src/verifiers/rules.js';
import { verifySchema } from '../../src/verifiers/config.js';
import { ruleSchema } from '../../src/verifiers/config.js';
import { prepareVerification } from '../../src/drift/setup.js';

const memory = (source: string, subject = 'user') => ({ id: 'm_1', subject, fact: 'f', source, confirmed_at: '2026-01-01 00:00:00' });
const compile = (raw: object, env: NodeJS.ProcessEnv = {}): CompiledRule => compileRule(ruleSchema.parse(raw), 0, env);

describe('rule schema (config verify.rules)', () => {
  const bad: [object, RegExp][] = [
    [{ match: { source: '^x' }, use: 'file', wth: {} }, /verify\.rules\.0: .*Unrecognized key.*\(wth\)/],
    [{ match: { source: '^x', body: 'y' }, use: 'file' }, /verify\.rules\.0\.match: .*\(body\)/],
    [{ match: { source: '([' }, use: 'file' }, /verify\.rules\.0\.match\.source: not a valid regular expression/],
    [{ match: { source: '^x' }, use: 'File!' }, /verify\.rules\.0\.use: a verifier name/],
    [{ match: { source: '^x' }, use: 'file', autoSupersede: true }, /verify\.rules\.0\.autoSupersede: autoSupersede needs a replacement/],
    [{ match: { source: '^x' }, use: 'file', replacement: { fact: 'x', by: 'y' } }, /verify\.rules\.0\.replacement/],
    [{ match: {}, use: 'file' }, /verify\.rules\.0\.match\.source/],
  ];
  for (const [rule, why] of bad) {
    it(`refuses ${JSON.stringify(rule)}`, () => {
      expect(() => validateConfig({ verify: { rules: [rule] } })).toThrow(why);
    });
  }

  it('checks each rule against its verifier and the environment when rules are prepared', async () => {
    const cfg = (rule: object) => validateConfig({ verify: { rules: [rule] } });
    await expect(prepareVerification(cfg({ match: { source: '^x' }, use: 'nosuch' }))).rejects.toThrow(/verify\.rules\.0\.use: no verifier named "nosuch" \(known: file, git, http\)/);
    await expect(prepareVerification(cfg({ match: { source: '^x' }, use: 'file', with: { path: 'a', selector: '$.x' } }))).rejects.toThrow(/verify\.rules\.0\.with\.\(root\): .*selector/);
    await expect(prepareVerification(cfg({ match: { source: '^x' }, use: 'file', with: { path: 1 } }))).rejects.toThrow(/verify\.rules\.0\.with\.path/);
    await expect(prepareVerification(cfg({ match: { source: '^x' }, use: 'file', with: { path: '${NOPE_UNSET}' } }), {})).rejects.toThrow(/verify\.rules\.0\.with\.path: "\$\{NOPE_UNSET\}" is neither a named group/);
    expect(() => compile({ match: { source: '^(?<source>x)' }, use: 'file' })).toThrow(/group name "source" is reserved/);
    expect(() => compile({ match: { source: '^x' }, use: 'file', with: { expect: { matches: '(' } } })).toThrow(/with\.expect: not a valid regular expression/);
  });
});

describe('malformed placeholders in rules', () => {
  const forms = ['${}', '${A B}', '${1A}', '${A-x}', '${A:=x}', '${A:?no}', '${A:+x}', '${PATH', 'http://h/${', 'a ${ b'];
  for (const form of forms) {
    it(`refuses ${form} in a URL, a header, a path, expect and replacement: one line naming the field`, () => {
      const cases: [object, RegExp][] = [
        [{ match: { source: '^x$' }, use: 'http', with: { url: `http://h/p?k=${form}` } }, /with\.url: ".*" is not a placeholder/],
        [{ match: { source: '^x$' }, use: 'http', with: { url: 'http://h/p', headers: { 'X-Key': form } } }, /with\.headers\.X-Key: ".*" is not a placeholder/],
        [{ match: { source: '^x$' }, use: 'file', with: { path: `./${form}.json` } }, /with\.path: ".*" is not a placeholder/],
        [{ match: { source: '^x$' }, use: 'file', with: { path: 'a.json', expect: form } }, /expect: ".*" is not a placeholder/],
        [{ match: { source: '^x$' }, use: 'file', with: { path: 'a.json' }, replacement: `now ${form}`, autoSupersede: true }, /replacement(\.fact)?: ".*" is not a placeholder/],
      ];
      for (const [rule, why] of cases) {
        expect(() => compile(rule, { A: 'set-value', PATH: '/usr/bin' }), JSON.stringify(rule)).toThrow(why);
        try {
          compile(rule, { A: 'set-value' });
        } catch (err) {
          expect((err as Error).message.split('\n')).toHaveLength(1);
        }
      }
    });
  }

  it('well-formed ones still compile: a group, an environment variable, a fallback, several in one string', () => {
    const rule = compile({ match: { source: '^cfg:(?<path>.+)$' }, use: 'http', with: { url: 'http://${HOST}/${path}?k=${KEY:-none}&v=${path}' } }, { HOST: 'h.example' });
    const m = matchRule([rule], memory('cfg:app'))!;
    expect(fillTree(rule.params, m.vars)).toEqual({ url: 'http://h.example/app?k=none&v=app' });
  });
});

describe('templates and matching', () => {
  it('fills named groups and env, never re-reads filled text as a template', () => {
    const rule = compile({ match: { source: '^cfg:(?<path>.+)$' }, use: 'file', with: { path: '${ROOT}/${path}', select: '$.a' } }, { ROOT: '/srv' });
    const m = matchRule([rule], memory('cfg:a${ROOT}.json'))!;
    expect(m.refused).toMatch(/shell metacharacters/);
    const ok = matchRule([rule], memory('cfg:app.json'))!;
    expect(fillTree(rule.params, ok.vars)).toEqual({ path: '/srv/app.json', select: '$.a' });
  });

  it('matches the first fitting rule by source and subject; strips drift: prefixes; checks subject groups', () => {
    const a = compile({ match: { source: '^svc:(?<name>\\w+)$', subject: '^(?<env>prod|staging)$' }, use: 'http' });
    const b = { ...compile({ match: { source: '^svc:' }, use: 'file' }), index: 1 };
    expect(matchRule([a, b], memory('svc:api', 'prod'))!.rule.use).toBe('http');
    expect(matchRule([a, b], memory('svc:api', 'dev'))!.rule.use).toBe('file');
    expect(matchRule([a, b], memory('drift:file:drift:http:svc:api', 'prod'))!.vars).toMatchObject({ name: 'api', env: 'prod', source: 'svc:api' });
    expect(matchRule([a, b], memory('chat'))).toBeUndefined();
    const s = compile({ match: { source: '^svc:', subject: '^(?<who>.+)$' }, use: 'file' });
    expect(matchRule([s], memory('svc:x', 'bob; rm -rf ~'))!.refused).toMatch(/subject group "who"/);
  });

  it('judges by regex (memory text escaped), by literal and by deep equality', () => {
    const rule = compile({ match: { source: '^v:(?<want>.+)$' }, use: 'file', with: { expect: '^${want}$' } });
    const vars = { want: '1.5' };
    expect(judge(rule.expect!, '1.5', vars)).toBe(true);
    expect(judge(rule.expect!, '105', vars)).toBe(false); // "." from memory text is literal
    expect(judge(rule.expect!, undefined, vars)).toBe(false);
    const eq = compile({ match: { source: '^x', fact: 'pair' }, use: 'file', with: { expect: { equals: { a: [1, 2] } } } });
    expect(judge(eq.expect!, { a: [1, 2] }, {})).toBe(true);
    expect(judge(eq.expect!, { a: [2, 1] }, {})).toBe(false);
    const num = compile({ match: { source: '^x', fact: 'Postgres 15' }, use: 'file', with: { expect: 15 } });
    expect(judge(num.expect!, '15', {})).toBe(true);
    expect(judge(num.expect!, 16, {})).toBe(false);
  });

  it('an expect that takes nothing from the memory needs match.fact: a constant judges no memory it does not claim', () => {
    for (const expect_ of ['pnpm', '^15', 15, true, { equals: 'staging' }, { matches: 'x' }, '${PINNED_ENV}']) {
      expect(() => compileRules(verifySchema.parse({ rules: [{ match: { source: '^project:(?<dir>.+)$', subject: 'package manager' }, use: 'file', with: { path: '${dir}', expect: expect_ } }] }), { PINNED_ENV: 'pnpm' }), JSON.stringify(expect_))
        .toThrow(/^config verify\.rules\.0\.with\.expect: compares what is read with a constant, whatever the memory says; add match\.fact/);
    }
    // from the memory: a group of its fact, of its source, or the fact itself
    const byFact = compile({ match: { source: '^project:(?<dir>.+)$', fact: '^prefers (?<pm>\\w+)$' }, use: 'file', with: { path: '${dir}', expect: '^${pm}$' } });
    const hit = matchRule([byFact], { id: 'm', subject: '', fact: 'prefers yarn', source: 'project:web', confirmed_at: '' })!;
    expect(hit.vars).toMatchObject({ dir: 'web', pm: 'yarn', fact: 'prefers yarn' });
    expect(judge(byFact.expect!, 'pnpm', hit.vars)).toBe(false);
    expect(judge(byFact.expect!, 'yarn', hit.vars)).toBe(true);
    expect(matchRule([byFact], { id: 'm', subject: '', fact: 'likes tabs', source: 'project:web', confirmed_at: '' })).toBeUndefined();
    expect(() => compile({ match: { source: '^x' }, use: 'file', with: { expect: { matches: '${fact}' } } })).not.toThrow();
    // a constant, for the memories that claim it
    expect(() => compile({ match: { source: '^x', fact: 'prefers pnpm$' }, use: 'file', with: { expect: 'pnpm' } })).not.toThrow();
    // a fact group with shell metacharacters is refused like a subject group
    const pathFromFact = compile({ match: { source: '^x$', fact: 'in (?<where>.+)$' }, use: 'file', with: { path: '${where}', expect: '${where}' } });
    expect(matchRule([pathFromFact], { id: 'm', subject: '', fact: 'in a; rm -rf ~', source: 'x', confirmed_at: '' })!.refused).toMatch(/fact group "where"/);
  });
});
