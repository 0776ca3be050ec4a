#include "platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)

#define WIN32_LEAN_AND_MEAN
#include <malloc.h>
#include <windows.h>

void *gt_aligned_alloc(size_t align, size_t size) { return _aligned_malloc(size ? size : 1, align); }
void gt_aligned_free(void *p) { _aligned_free(p); }

int32_t gt_cpu_count(void) {
    const DWORD n = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    return n >= 1 ? (int32_t)n : 1;
}

/* path is UTF-8 (what geist.h promises): converted to UTF-16 for CreateFileW */
gt_map_result gt_map_file(const char *path, void **map, size_t *size, char *why, size_t cap) {
    *map = NULL;
    *size = 0;
    const int wn = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, NULL, 0);
    wchar_t *wpath = wn > 0 ? malloc((size_t)wn * sizeof *wpath) : NULL;
    if (wpath == NULL || MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, wpath, wn) != wn) {
        free(wpath);
        snprintf(why, cap, "cannot open '%s': not a valid UTF-8 path", path);
        return GT_MAP_IO;
    }
    HANDLE f = CreateFileW(wpath, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING,
                           FILE_ATTRIBUTE_NORMAL | FILE_FLAG_SEQUENTIAL_SCAN, NULL);
    free(wpath);
    if (f == INVALID_HANDLE_VALUE) {
        snprintf(why, cap, "cannot open '%s': Windows error %lu", path, (unsigned long)GetLastError());
        return GT_MAP_IO;
    }
    LARGE_INTEGER li;
    if (GetFileType(f) != FILE_TYPE_DISK || !GetFileSizeEx(f, &li) || li.QuadPart < 0 ||
        (unsigned long long)li.QuadPart > (unsigned long long)SIZE_MAX) {
        CloseHandle(f);
        snprintf(why, cap, "'%s' is not a regular file", path);
        return GT_MAP_IO;
    }
    if (li.QuadPart == 0) {
        CloseHandle(f);
        snprintf(why, cap, "'%s' is empty, not a GGUF file", path);
        return GT_MAP_EMPTY;
    }
    HANDLE m = CreateFileMappingW(f, NULL, PAGE_READONLY, 0, 0, NULL);
    CloseHandle(f); /* the mapping object keeps the file open */
    void *p = m != NULL ? MapViewOfFile(m, FILE_MAP_READ, 0, 0, 0) : NULL;
    if (m != NULL) CloseHandle(m); /* the view keeps the mapping */
    if (p == NULL) {
        snprintf(why, cap, "cannot map '%s': Windows error %lu", path, (unsigned long)GetLastError());
        return GT_MAP_IO;
    }
    *map = p;
    *size = (size_t)li.QuadPart;
    return GT_MAP_OK;
}

void gt_unmap_file(void *map, size_t size) {
    (void)size;
    if (map) UnmapViewOfFile(map);
}

void gt_release_mapped_pages(void *p, size_t n) {
    (void)p; /* Windows trims a read-only view's clean pages under memory pressure by itself */
    (void)n;
}

#else /* POSIX */

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void *gt_aligned_alloc(size_t align, size_t size) {
    /* aligned_alloc wants size to be a multiple of align */
    const size_t rounded = (size + align - 1) & ~(align - 1);
    if (rounded < size) return NULL;
    return aligned_alloc(align, rounded ? rounded : align);
}

void gt_aligned_free(void *p) { free(p); }

int32_t gt_cpu_count(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int32_t)(n > INT32_MAX ? INT32_MAX : n) : 1;
}

gt_map_result gt_map_file(const char *path, void **map, size_t *size, char *why, size_t cap) {
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, cap, "cannot open '%s': %s", path, strerror(errno));
        return GT_MAP_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(why, cap, "'%s' is not a regular file", path);
        return GT_MAP_IO;
    }
    if (st.st_size == 0) {
        close(fd);
        snprintf(why, cap, "'%s' is empty, not a GGUF file", path);
        return GT_MAP_EMPTY;
    }
    /* pre-faulted: every weight page is read by the first forward pass anyway, and a game
     * would rather pay that while loading than as a stall in the first NPC reply */
    int flags = MAP_PRIVATE;
#ifdef MAP_POPULATE
    flags |= MAP_POPULATE;
#endif
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, flags, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(why, cap, "cannot map '%s': %s", path, strerror(errno));
        return GT_MAP_IO;
    }
    *map = p;
    *size = (size_t)st.st_size;
    return GT_MAP_OK;
}

void gt_unmap_file(void *map, size_t size) {
    if (map) munmap(map, size);
}

void gt_release_mapped_pages(void *p, size_t n) {
    const long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || !p) return;
    uintptr_t lo = (uintptr_t)p, hi = (uintptr_t)p + n;
    lo = (lo + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
    hi = hi / (uintptr_t)pg * (uintptr_t)pg;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

#endif
