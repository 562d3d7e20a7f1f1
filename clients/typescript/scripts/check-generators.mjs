// The spec must generate with openapi-typescript and with
// @hey-api/openapi-ts (the versions pinned in package.json) without a
// warning: each runs into a temporary directory, and any line of its output
// that warns or errs fails the check.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const here = new URL('..', import.meta.url).pathname;
const spec = join(here, '../../api/openapi.yaml');
const dir = mkdtempSync(join(tmpdir(), 'generators-'));
const generators = [
  ['openapi-typescript', [join(here, 'node_modules/openapi-typescript/bin/cli.js'), spec, '-o', join(dir, 'schema.d.ts')]],
  ['@hey-api/openapi-ts', [join(here, 'node_modules/@hey-api/openapi-ts/bin/run.js'), '-i', spec, '-o', join(dir, 'hey-api')]],
];
let failed = false;
try {
  for (const [name, args] of generators) {
    const r = spawnSync(process.execPath, args, { cwd: dir, encoding: 'utf8', env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' } });
    const out = `${r.stdout}\n${r.stderr}`;
    const warnings = out.split('\n').filter((l) => /warn|error|⚠|✘|✖/i.test(l));
    if (r.status !== 0 || warnings.length > 0) {
      failed = true;
      console.error(`${name}: exit ${r.status}, ${warnings.length} warning(s):\n${out}`);
    } else {
      console.log(`${name}: generated without warnings`);
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
