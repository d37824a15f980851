/*
 * report.h - what a simulated step means to a user: the summary numbers,
 * the critical path, and their text and JSON forms.
 */
#ifndef SIM_REPORT_H
#define SIM_REPORT_H

#include <stdio.h>
#include "engine.h"
#include "results.h"

/* Derive the summary of a simulated step. */
void report_summarize(const struct schedule *s, const struct sim_result *r, struct summary *out);

/* One line naming the policy: "fsdp sync-each x4, wrap block, reshard yes, ..." */
const char *report_policy_line(const struct experiment *e, char *buf, int len);

/* The readable summary. */
void report_print(FILE *f, const struct schedule *s, const struct summary *sum);

/* One JSON object: the summary fields and the resolved configuration. */
void report_json(FILE *f, const struct experiment *e, const struct summary *sum);

/* Byte count as "12.3 GiB" */
const char *report_bytes(uint64_t b, char *buf, int len);

#endif
