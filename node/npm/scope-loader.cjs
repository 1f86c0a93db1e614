// Rewrites the per-platform package names in a napi-rs generated loader from
// napi-rs's default `leasebeat-<platform>` to this project's scoped
// `@leasebeat/<platform>` (the names of the packages under npm/<platform>/).
// napi-rs always names them `<packageName>-<platform>`, which cannot produce a
// scoped name without a prefix. Usage: node npm/scope-loader.cjs index.js
'use strict'
const { readFileSync, writeFileSync } = require('node:fs')

const file = process.argv[2]
if (!file) {
  console.error('usage: node npm/scope-loader.cjs LOADER.js')
  process.exit(2)
}
const source = readFileSync(file, 'utf8')
const scoped = source.replace(/(['"])leasebeat-([a-z0-9]+(?:-[a-z0-9]+)*)\1/g, '$1@leasebeat/$2$1')
  .replace(/(['"])leasebeat-([a-z0-9]+(?:-[a-z0-9]+)*)\/package\.json\1/g, '$1@leasebeat/$2/package.json$1')
if (!scoped.includes("'@leasebeat/linux-x64-gnu'")) {
  console.error(`${file}: no leasebeat-linux-x64-gnu reference to rewrite (napi-rs loader changed?)`)
  process.exit(1)
}
writeFileSync(file, scoped)
