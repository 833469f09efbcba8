// The contract's fixtures, gate/testdata/contract in the repository: the Go gate's tests read the
// same files, so the two sides cannot drift apart without a test failing.
import * as fs from 'node:fs';
import * as path from 'node:path';

/** The fixtures' directory, from dist/test (compiled) or test (source). */
export const fixtureDir = path.resolve(__dirname, __dirname.includes(`${path.sep}dist${path.sep}`) ? '../../../..' : '../../..', 'gate/testdata/contract');

/** The fixture files whose names start with prefix, parsed, by name. */
export function fixtures(prefix: string): Map<string, Record<string, unknown>> {
  const out = new Map<string, Record<string, unknown>>();
  for (const f of fs.readdirSync(fixtureDir).sort()) {
    if (f.startsWith(prefix) && f.endsWith('.json')) {
      out.set(f, JSON.parse(fs.readFileSync(path.join(fixtureDir, f), 'utf8')));
    }
  }
  if (out.size === 0) throw new Error(`no fixture ${prefix}*.json in ${fixtureDir}`);
  return out;
}
