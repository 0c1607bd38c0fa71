import { z } from '../vendor/zod.js';
import { pathTextProblem } from './read.js';

/**
 * A file or folder named in config (a store's db, stateDb, snapshot.root, a target's path, a key file …): text
 * that can name one. An empty path resolved to the config file's own folder (`stores.a.db: ""` passed and was that
 * folder), blank text to a file named by its spaces, and a NUL byte no system call takes.
 */
export const pathField = () =>
  z
    .string()
    .min(1, 'a path, not empty text')
    .superRefine((path, ctx) => {
      const problem = pathTextProblem(path);
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    })
    // In config/schema.json too: the test that keeps isPathField (a path from the environment shown in errors, not
    // hidden as a secret) to exactly these fields reads it there.
    .meta({ 'x-names-a-file': true, pattern: PATH_TEXT_PATTERN });

/** pathTextProblem's rule as config/schema.json says it: not only white space (as JavaScript's trim() reads it), no NUL. */
export const PATH_TEXT_PATTERN = '^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$';
