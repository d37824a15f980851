/*
 * compare.h - `./sim --compare RUN.h5`: how far each prediction is from
 * its measurement.
 *
 * For every measured run of a results file (source gpu_run or pytorch),
 * the configuration is rebuilt from the run's attributes through the
 * config parser, simulated with a calibration of the hardware that ran it
 * (the one given, else data/calibration/<hardware>-<device>.h5 when it
 * exists, else the catalog), and set against the measurement: step time
 * (the median of the measured steps, and whether the error is inside their
 * own 10th-90th percentile spread), compute and exposed communication,
 * peak allocated and reserved memory, and the time of each op kind and of
 * each stream. The predictions are appended to the same file as simulated
 * runs that name the run they predict (`compares`); nothing already there
 * is touched. Over the runs: the median and the worst absolute step-time
 * error, and Kendall's tau between the measured and predicted order of the
 * runs by step time.
 */
#ifndef SIM_COMPARE_H
#define SIM_COMPARE_H

#include <stdio.h>

/*
 * Compare the measured runs of path; calibration ("" for the default
 * search) prices them; with catalog_now each run's GPU model constants
 * are today's catalog's, not its record's (config_gpu_model_from_catalog).
 * Prints a table, or with json one object, to out.
 * 0; 1 when a run could not be compared or the predictions not appended;
 * 2 when the file cannot be read.
 */
int compare_file(const char *path, const char *calibration, int catalog_now, int json, FILE *out);

#endif
