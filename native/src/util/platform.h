/* What differs between operating systems, behind one small interface: aligned allocation, the
 * number of CPUs, and read-only file mappings. POSIX (Linux, Android, macOS) and Windows sides
 * live in platform.c; nothing else in the core includes an operating system header for these.
 *
 * Threads are POSIX threads everywhere: on Windows the build links mingw-w64's winpthreads
 * statically (SConstruct, target=windows-x86_64), so geist.dll depends on no extra DLL and the
 * pthread code of util/pool.c and runtime/runtime.c runs unchanged. Stateless; thread-safe. */
#ifndef GEIST_PLATFORM_H
#define GEIST_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

/* size bytes aligned to align (a power of two, >= sizeof(void *)); NULL when out of memory.
 * Free with gt_aligned_free, never free(). */
void *gt_aligned_alloc(size_t align, size_t size);
void gt_aligned_free(void *p);

/* Online logical CPUs, >= 1. */
int32_t gt_cpu_count(void);

/* Maps the regular file at path read-only (private, pre-faulted where the OS can) into
 * *map / *size. Returns 0, or -1 with a message in why (cap bytes): not found, not a regular
 * file, empty (then *size = 0 and the message says so), or the mapping failed. */
typedef enum gt_map_result { GT_MAP_OK = 0, GT_MAP_IO = 1, GT_MAP_EMPTY = 2 } gt_map_result;
gt_map_result gt_map_file(const char *path, void **map, size_t *size, char *why, size_t cap);
void gt_unmap_file(void *map, size_t size);

/* Gives back the resident pages wholly inside [p, p + n) of a read-only file mapping (they are
 * read again from the file if touched): a device that copied the tensors drops the host's pages
 * of them. Best effort; a no-op where the OS has no such call. */
void gt_release_mapped_pages(void *p, size_t n);

#endif
