import { statSync } from 'node:fs';
import { configError, usageError } from '../core/errors.js';
import { kindOf } from './private-file.js';

/**
 * A store's file given as something that is no file (a folder, a device, a FIFO): refused before anything opens
 * it, in one line naming where it was given (`config warden.yaml: stores.agent.db`, or `--db`), exit 2. A path with
 * nothing there yet is left to the command (`init --create` makes it; the others say there is no such store).
 */
export function assertStorePath(path: string, field: string, given: 'config' | 'option' = 'config'): void {
  let st;
  try {
    st = statSync(path);
  } catch {
    return;
  }
  if (st.isFile()) return;
  const message = `${field}: ${path} is ${kindOf(st)}, not a SQLite file (give the store's file)`;
  throw given === 'config' ? configError(message) : usageError(message);
}
