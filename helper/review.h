#ifndef SAFEBOX_REVIEW_H
#define SAFEBOX_REVIEW_H

/* Run "--review --namespace-fd N --plan-fd N": mount the held run's
 * overlays in the sandbox's mount namespace (review.c has the plan).
 * Returns 0; dies (125) naming the step that failed. */
int review_main(int argc, char **argv);

#endif
