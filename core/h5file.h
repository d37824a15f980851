/*
 * h5file.h - the HDF5 files the testbed writes: appends that never lose
 * what a file holds, and failed library calls reported as one line.
 *
 * h5file_append() adds to a file without writing it in place: it holds an
 * exclusive flock on the file's directory, removes temporaries that dead
 * writers left there (core/outfile.h), reads the file (if any) into
 * memory, lets the caller's writer add to that in-memory image (HDF5's
 * core driver, no backing store), writes the new image to
 * `path.tmp.<pid>` beside it with plain write() calls, fsyncs it and
 * renames it over the original. A failure at any point (a full disk
 * included) removes the temporary, leaves the original as it was and is
 * reported as one line; HDF5 itself never writes a file, so no failed
 * H5Fclose is left for its library shutdown to crash on. A symbolic link
 * is followed: its target is replaced and the link stays. Two writers
 * appending to the same file take turns and both additions land. An
 * append holds the file in memory twice and writes it whole, fine for
 * files of a few hundred runs. Both the results files (core/results.c)
 * and the GPU benchmark's file (gpu/cuda/gpu_bench.cu) are written
 * through it.
 *
 * While a session is open HDF5's automatic error printing is off; a failed
 * call is reported once, as `who: path: call failed: messages` (the
 * outermost and innermost of HDF5's error stack). Errors are sticky, as
 * with ferror(): after the first, `failed` stays set.
 */
#ifndef CORE_H5FILE_H
#define CORE_H5FILE_H

#include <stdint.h>

#include <hdf5.h>

#ifdef __cplusplus
extern "C" {
#endif

struct h5file_session {
	const char *who;   /* the writer, first word of its messages ("results") */
	const char *path;  /* the file named in messages (the user's, not the copy) */
	int failed;
	H5E_auto2_t saved_func;
	void *saved_data;
};

void h5file_begin(struct h5file_session *s, const char *who, const char *path);
void h5file_end(struct h5file_session *s);
/*
 * Check the return of an HDF5 call (hid_t, herr_t or htri_t: negative is a
 * failure); on the first failure print the line. 0 when rv is good, else -1.
 */
int h5file_check(struct h5file_session *s, int64_t rv, const char *call);

/* Adds to the open copy of the file; 0, or -1 (after reporting) to abandon the append. */
typedef int (*h5file_writer)(struct h5file_session *s, hid_t file, void *ctx);

/* Append to the HDF5 file at path (created when missing) with fn. 0, or -1 after a message. */
int h5file_append(const char *who, const char *path, h5file_writer fn, void *ctx);

/*
 * Whose an HDF5 file is, by what its root holds. h5file_holds: 1 when the
 * open file's root has one of the links named in groups (NULL-terminated)
 * or no link at all (a new file), 0 when it holds other things only, -1
 * on a failed call (nothing reported). h5file_refusal: why the existing
 * regular file at path may not be appended to by a writer of such files
 * (who: the first word of its messages), or NULL when it may: "exists and
 * is not an HDF5 file", an HDF5 file that cannot be opened or read,
 * not_ours when h5file_holds() says 0, or one of the groups there that is
 * no group ("is an HDF5 file whose /runs is a dataset, not a group") or
 * is full (its last index, NNNNNN = 999999, taken: h5file_next_group()
 * could add nothing); quiet, and it changes nothing; a reason it makes up
 * lasts until the next call. For the outfile_refusal_fn of each kind of
 * file (core/outfile.h): results_refusal(), calibration_refusal().
 * h5file_check_ours: the writer's own check of the open file, the same
 * rules, 0, or -1 after a message ("PATH: not_ours; not touching it").
 */
int h5file_holds(hid_t file, const char *const *groups);
int h5file_check_ours(struct h5file_session *s, hid_t file, const char *const *groups, const char *not_ours);
const char *h5file_refusal(const char *who, const char *path, const char *const *groups, const char *not_ours);

/*
 * The group /parent/NNNNNN after the highest six-digit index there
 * (parent created when missing), its name in name[16]. A group id, or -1
 * after reporting (also when the index is exhausted).
 */
hid_t h5file_next_group(struct h5file_session *s, hid_t file, const char *parent, char name[16]);

/*
 * Attributes and datasets; each does nothing once the session has failed,
 * so a run of them is checked once, at its end. Strings are
 * variable-length UTF-8 (h5py reads them as str). h5file_attr_write: n
 * elements of mem_type stored as file_type (n < 0: a scalar; likewise
 * h5file_attr_strs, whose values[0] is then the one string).
 */
void h5file_attr_write(struct h5file_session *s, hid_t loc, const char *name, hid_t file_type,
		       hid_t mem_type, int n, const void *data);
void h5file_attr_str(struct h5file_session *s, hid_t loc, const char *name, const char *value);
void h5file_attr_strs(struct h5file_session *s, hid_t loc, const char *name, int n, const char *const *values);
void h5file_attr_i32(struct h5file_session *s, hid_t loc, const char *name, int32_t v);
void h5file_attr_u64(struct h5file_session *s, hid_t loc, const char *name, uint64_t v);
void h5file_attr_f64(struct h5file_session *s, hid_t loc, const char *name, double v);
/* An HDF5 enum over uint8 with values 0..n-1 named names[i]; caller closes; -1 after reporting. */
hid_t h5file_enum_type(struct h5file_session *s, const char *const *names, int n);
/*
 * n rows of the compound mem_type as dataset `name` of loc, stored packed,
 * chunked and deflated when there are rows.
 */
void h5file_dataset(struct h5file_session *s, hid_t loc, const char *name, hid_t mem_type, size_t n,
		    const void *rows);

/*
 * Reading back: scalar attributes (0, or -1 after reporting), whether one
 * exists, and a whole dataset converted to the compound mem_type (fields
 * matched by name; a field the file lacks is left zero). The rows are
 * malloc'ed (free them); NULL after reporting.
 */
int h5file_has_attr(hid_t loc, const char *name);
int h5file_read_f64(struct h5file_session *s, hid_t loc, const char *name, double *v);
int h5file_read_i32(struct h5file_session *s, hid_t loc, const char *name, int32_t *v);
int h5file_read_u64(struct h5file_session *s, hid_t loc, const char *name, uint64_t *v);
int h5file_read_str(struct h5file_session *s, hid_t loc, const char *name, char *buf, size_t len);
void *h5file_read_dataset(struct h5file_session *s, hid_t loc, const char *name, hid_t mem_type, size_t *n);

#ifdef __cplusplus
}
#endif

#endif
