/*
 * backend.c - what every backend shares: release, and the re-entry guard of
 * its library calls (see backend.h).
 */
#include "backend.h"

/* Library calls of a backend the calling thread is inside (they may nest). */
static __thread unsigned backend_calls;

void kvb_backend_call_begin(void)
{
    backend_calls++;
}

void kvb_backend_call_end(void)
{
    backend_calls--;
}

bool kvb_in_backend_call(void)
{
    return backend_calls > 0;
}

void kvb_backend_release(struct kvb_backend *be)
{
    if (be->ops && be->ops->release) be->ops->release(be->ctx);
    be->ops = NULL;
    be->ctx = NULL;
}
