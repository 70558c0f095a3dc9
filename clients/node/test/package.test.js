// The package itself: the protos it ships are the repository's, and index.d.ts describes the
// client (tsc --noEmit on test/types-usage.ts, which also holds uses that must be refused).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.resolve(here, '..');
const repoProto = path.resolve(pkg, '..', '..', 'proto', 'zkgate', 'v1');
const shipped = path.join(pkg, 'proto', 'zkgate', 'v1');

test('the shipped protos equal the repository proto/ (copy them again after a change)', () => {
  const names = (dir) => readdirSync(dir).filter((n) => n.endsWith('.proto')).sort();
  assert.deepEqual(names(shipped), names(repoProto), 'cp proto/zkgate/v1/*.proto clients/node/proto/zkgate/v1/');
  for (const n of names(repoProto)) {
    assert.equal(
      readFileSync(path.join(shipped, n), 'utf8'),
      readFileSync(path.join(repoProto, n), 'utf8'),
      `clients/node/proto/zkgate/v1/${n} is stale: cp proto/zkgate/v1/*.proto clients/node/proto/zkgate/v1/`,
    );
  }
});

test('index.d.ts type-checks a typed use of the client (tsc --noEmit)', { timeout: 120000 }, async () => {
  const tsc = path.join(pkg, 'node_modules', 'typescript', 'bin', 'tsc');
  assert.ok(existsSync(tsc), 'typescript is a devDependency: npm ci');
  try {
    await promisify(execFile)(process.execPath, [tsc, '-p', path.join(here, 'tsconfig.json')], { cwd: pkg });
  } catch (e) {
    assert.fail(`tsc --noEmit failed:\n${e.stdout}${e.stderr}`);
  }
});
