import { readFileSync } from 'node:fs';
import { relative, resolve } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The order test files start in: the longest first, so that the last to finish are short ones and the cores stay
 * busy to the end. Lengths are the seconds of a recorded run (test/durations.json; `node dist/scripts/test-durations.js
 * <vitest JSON report>` rewrites it), not vitest's own record of this checkout's runs, which a fresh clone lacks:
 * there vitest starts the largest files first, and a shard (a few lines running a long suite) last. A file the record
 * does not know starts first (it may be long); projects keep their order (sequence.groupOrder).
 */
const ROOT = resolve(import.meta.dirname, '../..');
const RECORDED = JSON.parse(readFileSync(resolve(ROOT, 'test/durations.json'), 'utf8')) as Record<string, number>;

export default class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const seconds = (f: TestSpecification) => RECORDED[relative(ROOT, f.moduleId)] ?? Number.MAX_SAFE_INTEGER;
    return [...files].sort((a, b) =>
      a.project.config.sequence.groupOrder - b.project.config.sequence.groupOrder
      || (a.project.name < b.project.name ? -1 : a.project.name > b.project.name ? 1 : 0)
      || seconds(b) - seconds(a)
      || (a.moduleId < b.moduleId ? -1 : 1));
  }
}
