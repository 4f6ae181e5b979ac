/* A test-harness shim for Wine 8.0, never shipped: Wine 8.0's bcryptprimitives.dll lacks
 * ProcessPrng, which Rust's standard library (1.78 and later) calls for its random seeds on
 * Windows (every Windows 10 and later has it). This stand-in, loaded by Wine in place of its
 * own (WINEDLLOVERRIDES=bcryptprimitives=n), gives it from RtlGenRandom (advapi32's
 * SystemFunction036). scripts/release.sh builds it with zig for the Windows build's tries. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
