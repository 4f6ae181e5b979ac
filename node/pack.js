'use strict';
// The npm package as a tarball: `node pack.js DEST PLATFORM-ARCH=TINYQ_SO...`, for example
//   node pack.js ../dist linux-x64=../dist/release/linux-x86_64/tinyq.so linux-arm64=...
//     win32-x64=../dist/release/windows-x86_64/tinyq.dll
// Stages the files package.json lists in a fresh folder beside DEST, with each given build
// as prebuilds/PLATFORM-ARCH/tinyq.so (tinyq.dll for win32-*: what extensionPath() picks
// from at run time, sql.js's packagedPath) and the version read from ../Cargo.toml, the one
// place it is written; then runs npm pack there and prints the tarball's path. `make npm-pack` packs dist/tinyq.so for this machine alone.
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

function cargoVersion() {
  const cargo = fs.readFileSync(path.join(__dirname, '..', 'Cargo.toml'), 'utf8');
  const pkg = cargo.split('[package]')[1].split('\n[')[0];
  return pkg.match(/^version = "([^"]+)"/m)[1];
}

// The README links the repository's docs (../docs/X.md): the package carries them as docs/,
// and its README links them there, so every link works inside node_modules/tinyq too.
function packDocs(stage) {
  const docs = path.join(__dirname, '..', 'docs');
  fs.mkdirSync(path.join(stage, 'docs'));
  for (const name of fs.readdirSync(docs).filter((f) => f.endsWith('.md'))) {
    fs.copyFileSync(path.join(docs, name), path.join(stage, 'docs', name));
  }
  const readme = path.join(stage, 'README.md');
  fs.writeFileSync(readme, fs.readFileSync(readme, 'utf8').replaceAll('../docs/', 'docs/'));
}

function main([dest, ...builds]) {
  if (!dest || builds.length === 0 || builds.some((b) => !/^[a-z0-9]+-[a-z0-9]+(-musl)?=./.test(b))) {
    throw new Error('usage: node pack.js DEST PLATFORM-ARCH=TINYQ_SO...');
  }
  const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, 'package.json'), 'utf8'));
  const stage = fs.mkdtempSync(path.join(path.resolve(dest), '.npm-stage-'));
  try {
    for (const name of manifest.files.filter((f) => f !== 'prebuilds')) {
      fs.copyFileSync(path.join(__dirname, name), path.join(stage, name));
    }
    packDocs(stage);
    for (const build of builds) {
      const [target, so] = build.split(/=(.*)/s);
      fs.mkdirSync(path.join(stage, 'prebuilds', target), { recursive: true });
      const file = target.startsWith('win32-') ? 'tinyq.dll' : 'tinyq.so'; // as sql.js's packagedPath
      if (path.extname(so) !== path.extname(file)) throw new Error(`${target} takes a ${path.extname(file)}, not ${so}`);
      fs.copyFileSync(so, path.join(stage, 'prebuilds', target, file));
    }
    delete manifest.scripts.prepack;
    manifest.files.push('docs');
    manifest.version = cargoVersion();
    fs.writeFileSync(path.join(stage, 'package.json'), JSON.stringify(manifest, null, 2) + '\n');
    const out = execFileSync('npm', ['pack', '--silent', '--pack-destination', path.resolve(dest)],
      { cwd: stage, encoding: 'utf8' });
    console.log(path.join(path.resolve(dest), out.trim().split('\n').pop()));
  } finally {
    fs.rmSync(stage, { recursive: true, force: true });
  }
}

main(process.argv.slice(2));
