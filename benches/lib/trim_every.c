/* An LD_PRELOAD library for benches/atlas_alloc_ab.sh: a thread that calls malloc_trim(0)
 * every TRIM_MS milliseconds (default 1000), giving every whole free page of every glibc arena
 * back to the system. If a peak RSS were freed memory that glibc keeps, this would remove it
 * (BENCHMARKS "Atlas scale", session 64). Build: gcc -O2 -shared -fPIC -o libtrim.so trim_every.c
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
static void *loop(void *arg) {
  long ms = (long)arg;
  for (;;) { usleep(ms * 1000); malloc_trim(0); }
  return 0;
}
__attribute__((constructor)) static void start(void) {
  const char *e = getenv("TRIM_MS");
  long ms = e ? atol(e) : 1000;
  pthread_t t; pthread_create(&t, 0, loop, (void *)ms); pthread_detach(t);
}
