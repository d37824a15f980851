/*
 * experiment.h - one experiment: model, cluster, policy and run settings.
 *
 * Plain data, shared by every module that builds, prices or runs a step
 * (schedule, results, the simulator, the runtime). How an experiment is
 * read from files and flags, resolved and checked is config.h's business;
 * this header does not depend on it.
 *
 * Invariant: an experiment handed to schedule_new() has been resolved by
 * config_resolve() (catalog values filled in, policy canonical and valid)
 * and is not changed while a schedule points to it.
 */
#ifndef CORE_EXPERIMENT_H
#define CORE_EXPERIMENT_H

#include "model.h"
#include "hw.h"
#include "policy.h"

#define CONFIG_PATH_MAX 512

struct run_settings {
	int batch;        /* sequences per rank per microbatch */
	int steps;        /* optimizer steps gpu_run measures */
	int warmup;       /* steps gpu_run runs before measuring */
	unsigned long seed;
	char device[16];  /* the runtime's device: "cpu" or "cuda" */
	char out[CONFIG_PATH_MAX];   /* results file to append to, "" for none */
	double lr;        /* AdamW hyper-parameters for gpu_run */
	double weight_decay;
	double eps;       /* AdamW's epsilon */
	double timeout_s; /* gpu_run's watchdog: a rank without progress this long aborts the job; 0 off */
};

struct experiment {
	char path[CONFIG_PATH_MAX];  /* the experiment file, "" when none */
	char model_name[MODEL_NAME_MAX];
	char gpu_name[HW_NAME_MAX];
	struct model_shape model;    /* resolved */
	struct cluster cluster;      /* resolved */
	/* a calibration file (core/calibration.h) the simulator prices with instead of the catalog's constants, "" */
	char calibration[CONFIG_PATH_MAX];
	struct policy policy;
	struct runtime_spec runtime; /* resolved from policy.runtime */
	/*
	 * The kernels launched when they are not the runtime's kernel recipe
	 * ("": the runtime's; core/recipe.h's names): "testbed" for a run
	 * gpu_run measured, whose backends launch the testbed's kernels under
	 * every runtime's schedule (./sim --compare sets it). The memory stays
	 * the runtime's: what the schedule allocates follows runtime.kernels.
	 */
	char launch_kernels[16];
	/*
	 * The attention kernel launched when it is not the runtime's
	 * (core/recipe.h's attention_kernel_names; "": the runtime's, or
	 * policy.sdpa's): gpu_run's own ("testbed"), or cuDNN's where its
	 * CUDA backend ran cuDNN's fused attention (./sim --compare sets it)
	 */
	char launch_attention[16];
	/*
	 * The fabric whose calibration sessions price it ("real", "emulated";
	 * "": the newest session's, core/calibration.h): a measured run's own,
	 * which ./sim --compare sets for gpu_run's runs (one process as rank
	 * 0 of N computes alone; N processes of a real job share the machine).
	 */
	char calibration_fabric[16];
	struct run_settings run;
	/* where each key was set, for error messages; private to config */
	void *origins;
};

#endif
