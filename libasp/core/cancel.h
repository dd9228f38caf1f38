/*
 * cancel.h - the cancel token's internals: the fd a wait polls.
 */
#ifndef ASP_CANCEL_H
#define ASP_CANCEL_H

#include "common.h"

/* The read end of the token's wake-up pipe: readable once triggered. */
int asp__cancel_fd(const asp_cancel *c);

#endif
