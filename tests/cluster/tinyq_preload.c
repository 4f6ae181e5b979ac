/* LD_PRELOAD shim: puts tinyq on every SQLite connection a process opens.
 *
 * dqlite nodes (dqlite-demo, or any go-dqlite app) open their databases through the
 * system libsqlite3.so.0 and offer no way to load an extension. Preloading this
 * library makes its constructor dlopen tinyq ($TINYQ_EXT, default ./dist/tinyq.so) and
 * register tinyq's entry point with sqlite3_auto_extension, so every connection the
 * node opens afterwards has tinyq's functions.
 *
 * Build: gcc -shared -fPIC -O2 -o tinyq_preload.so tinyq_preload.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*auto_ext_fn)(void (*)(void));

__attribute__((constructor)) static void tinyq_preload(void) {
    const char *path = getenv("TINYQ_EXT");
    if (!path || !*path) path = "./dist/tinyq.so";
    void *sqlite = dlopen("libsqlite3.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (!sqlite) {
        fprintf(stderr, "tinyq_preload: %s\n", dlerror());
        return;
    }
    auto_ext_fn auto_ext = (auto_ext_fn)dlsym(sqlite, "sqlite3_auto_extension");
    void *ext = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!ext || !auto_ext) {
        fprintf(stderr, "tinyq_preload: cannot load %s: %s\n", path, dlerror());
        return;
    }
    void (*init)(void) = (void (*)(void))dlsym(ext, "sqlite3_tinyq_init");
    if (!init) {
        fprintf(stderr, "tinyq_preload: no sqlite3_tinyq_init in %s\n", path);
        return;
    }
    int rc = auto_ext(init);
    if (rc != 0) fprintf(stderr, "tinyq_preload: sqlite3_auto_extension failed (%d)\n", rc);
    if (getenv("TINYQ_PRELOAD_VERBOSE")) fprintf(stderr, "tinyq_preload: loaded %s\n", path);
}
