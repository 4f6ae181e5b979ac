'use strict';
// Runs a wasm32-wasip1 program under Node's WASI: node wasi_run.js PROGRAM.wasm DIR ARGS...
// DIR is the program's /data (its only folder); ARGS follow the program's name.
const fs = require('fs');
const { WASI } = require('node:wasi');

const [program, dir, ...args] = process.argv.slice(2);
const wasi = new WASI({ version: 'preview1', args: [program, ...args], env: {}, preopens: { '/data': dir } });
const instance = new WebAssembly.Instance(new WebAssembly.Module(fs.readFileSync(program)), wasi.getImportObject());
process.exitCode = wasi.start(instance);
