/*
 * bcryptprimitives.dll for Wine 8: Go programs since Go 1.24 get their
 * random bytes from ProcessPrng in bcryptprimitives.dll, which Wine 8 does
 * not ship, and stop at startup without it ("bcryptprimitives.dll not
 * found"). This DLL exports ProcessPrng, filling the buffer from
 * RtlGenRandom (advapi32's SystemFunction036), and is copied into the Wine
 * prefix's system32 by winetest/run. Test tooling only: it is never part of
 * gpuexec.
 */
#include <windows.h>
#define SystemFunction036 NTAPI SystemFunction036
#include <ntsecapi.h>
#undef SystemFunction036

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!RtlGenRandom(data, n))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
