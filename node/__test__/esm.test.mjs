// The ES module entry (index.mjs) exports exactly what the CommonJS entry
// (index.js, generated) exports, and both load the same native addon.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'

import * as esm from 'leasebeat'
import binding from 'leasebeat'

const require = createRequire(import.meta.url)
const cjs = require('leasebeat')

test('index.mjs and main.js export the same names and objects', () => {
  const esmNames = Object.keys(esm).filter((k) => k !== 'default').sort()
  const cjsNames = Object.keys(cjs).sort()
  assert.deepEqual(esmNames, cjsNames)
  for (const k of cjsNames) assert.equal(esm[k], cjs[k], k)
  assert.equal(binding, cjs)
  assert.equal(esm.__napiBindingTarget, 'native')
})

test('package.json resolves through its exports map', () => {
  const pkg = require('leasebeat/package.json')
  assert.equal(pkg.name, 'leasebeat')
  assert.equal(pkg.exports['.'].import, './index.mjs')
  assert.equal(pkg.exports['.'].require, './main.js')
})

test('the package under test is the installed one', { skip: process.env.LEASEBEAT_EXPECT_INSTALLED !== '1' }, () => {
  // scripts/test-node.sh installs the packed tarball into a temporary project;
  // both entry points must resolve inside its node_modules.
  assert.match(import.meta.resolve('leasebeat'), /\/node_modules\/leasebeat\/index\.mjs$/)
  assert.match(require.resolve('leasebeat'), /\/node_modules\/leasebeat\/main\.js$/)
})
