// src/schema.d.ts must be what openapi-typescript makes of api/openapi.yaml
// today: regenerate it into a temporary file and compare.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const here = new URL('..', import.meta.url).pathname;

test('the generated types are current with api/openapi.yaml', () => {
  const dir = mkdtempSync(join(tmpdir(), 'schema-'));
  try {
    const out = join(dir, 'schema.d.ts');
    execFileSync(process.execPath, [join(here, 'node_modules/openapi-typescript/bin/cli.js'), join(here, '../../api/openapi.yaml'), '-o', out],
      { cwd: here, stdio: 'pipe' });
    assert.ok(readFileSync(join(here, 'src/schema.d.ts'), 'utf8') === readFileSync(out, 'utf8'),
      'src/schema.d.ts is stale: run `npm run generate` in clients/typescript');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
