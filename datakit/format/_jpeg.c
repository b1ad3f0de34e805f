/* JPEG decoding with libjpeg-turbo for datakit: regions for datakit.vision, whole images for reads.
 *
 * A random crop of a photo needs only part of the image. libjpeg-turbo can
 * decode at 1/8, 2/8, ..., 8/8 of the size (the IDCT does the scaling), skip
 * the rows above a region (jpeg_skip_scanlines: entropy decoding only, no
 * IDCT, upsampling or colour conversion), restrict the columns it converts
 * (jpeg_crop_scanline, aligned to the iMCU grid) and stop after the region's
 * last row (the rest of the file is never entropy-decoded). Neither Pillow nor
 * simplejpeg exposes the last three, so datakit carries this small binding.
 *
 * The contract: the region written is exactly what a full decode at the same
 * scale would hold there. jpeg_crop_scanline widens the columns to the iMCU
 * grid and makes the columns at the edge of a cropped range differ (fancy
 * upsampling sees no neighbour there), so two more columns are asked for on
 * each side (with one, a region one column wide at the left edge of a 4:2:0
 * image, a cropped range two columns wide, differed in libjpeg-turbo 2.1.5),
 * and each row is copied from the widened range into ``out``.
 *
 * One rule decides whether a JPEG decodes, on every read path (docs/reliability.md,
 * "Hostile stores"): libjpeg's errors refuse it, its warnings about corrupt
 * entropy-coded data do not (it resynchronises, as in Pillow), and data that
 * ends before the end-of-image marker refuses it (libjpeg would fill the rest
 * with grey). decode_image applies the rule by reading to that marker. A region
 * stops early, so it cannot see a cut below itself: for a file of one scan it
 * first checks that the scan is followed by the end-of-image marker (a search
 * for 0xFF bytes, without decoding), and refuses the file otherwise. Files of
 * several scans (progressive ones) are read to their end by jpeg_start_decompress.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf escape;
    char message[JMSG_LENGTH_MAX];
} ErrorManager;

static void on_error(j_common_ptr cinfo) {
    ErrorManager *manager = (ErrorManager *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, manager->message);
    longjmp(manager->escape, 1);
}

/* Warnings about corrupt data are tolerated (see the top of this file); running
 * out of data is not: a record that decodes only with libjpeg's grey fill is cut. */
static void on_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
        on_error(cinfo);
    }
}

static PyObject *UnsupportedJpeg;

/* Rows asked of jpeg_read_scanlines at a time: one at a time costs about 5 % more (its per-call
 * work, and the upsampler's spare-row copy), measured on 300-500 px photos. */
#define ROWS_PER_READ 8

enum { DONE, FAILED, UNSUPPORTED, BAD_SCALE, BAD_REGION, TOO_SMALL, NO_MEMORY, NO_END };

/* One decode: what to read, where to, and how it went. */
typedef struct {
    const unsigned char *data;
    size_t length;
    unsigned char *out;
    size_t out_length;
    int scale_num, x, y, width, height;
    Py_ssize_t row_stride;  /* bytes from one output row to the next; 0: packed rows */
    int whole;  /* every row at full scale, read to the end-of-image marker */
    int status;
    JDIMENSION scaled_width, scaled_height;
    unsigned char *row_buffer;
} Job;

/* Whether the entropy-coded data from ``scan`` is followed by the end-of-image
 * marker: the first marker after it, other than a restart marker, is EOI. In
 * entropy-coded data 0xFF is followed by 0x00 (a stuffed byte), by more 0xFF
 * (fill) or by a marker code, so a search for 0xFF finds every marker. */
static int ends_with_eoi(const unsigned char *scan, const unsigned char *end) {
    const unsigned char *at = scan;
    while (at < end) {
        at = memchr(at, 0xFF, (size_t)(end - at));
        if (at == NULL) {
            return 0;
        }
        while (at < end && *at == 0xFF) {
            at++;
        }
        if (at == end) {
            return 0;
        }
        unsigned char code = *at++;
        if (code != 0x00 && (code < 0xD0 || code > 0xD7)) {
            return code == 0xD9;
        }
    }
    return 0;
}

/* Reads the header and sets the output up; 0 when the job ends here (its status says why). */
static int prepare(j_decompress_ptr cinfo, Job *job) {
    if (!job->whole && (job->scale_num < 1 || job->scale_num > 16)) {  /* libjpeg-turbo's n/8 scales */
        job->status = BAD_SCALE;
        return 0;
    }
    jpeg_mem_src(cinfo, job->data, (unsigned long)job->length);
    jpeg_read_header(cinfo, TRUE);
    if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
        job->status = UNSUPPORTED;
        return 0;
    }
    if (!job->whole && !jpeg_has_multiple_scans(cinfo)
            && !ends_with_eoi(cinfo->src->next_input_byte, job->data + job->length)) {
        job->status = NO_END;
        return 0;
    }
    cinfo->scale_num = job->whole ? 8 : (unsigned int)job->scale_num;
    cinfo->scale_denom = 8;
    cinfo->out_color_space = JCS_EXT_RGB;
    cinfo->dct_method = JDCT_ISLOW;  /* Pillow's default: the same pixels */
    jpeg_calc_output_dimensions(cinfo);
    job->scaled_width = cinfo->output_width;
    job->scaled_height = cinfo->output_height;
    if (job->whole) {
        job->x = job->y = 0;
        job->width = (int)cinfo->output_width;
        job->height = (int)cinfo->output_height;
    }
    if (job->x < 0 || job->y < 0 || job->width <= 0 || job->height <= 0
            || (JDIMENSION)job->x + (JDIMENSION)job->width > job->scaled_width
            || (JDIMENSION)job->y + (JDIMENSION)job->height > job->scaled_height) {
        job->status = BAD_REGION;
        return 0;
    }
    if (job->row_stride == 0) {
        job->row_stride = (Py_ssize_t)job->width * 3;
    }
    if (job->row_stride < (Py_ssize_t)job->width * 3
            || job->out_length < (size_t)(job->height - 1) * (size_t)job->row_stride + (size_t)job->width * 3) {
        job->status = TOO_SMALL;
        return 0;
    }
    return 1;
}

/* Decodes the job's rows into ``out`` (libjpeg's errors jump out of here). */
static void read_rows(j_decompress_ptr cinfo, Job *job, ErrorManager *errors) {
    jpeg_start_decompress(cinfo);
    /* two columns of margin on each side, see the top of this file */
    JDIMENSION first = job->x > 1 ? (JDIMENSION)job->x - 2 : 0;
    JDIMENSION last = (JDIMENSION)job->x + (JDIMENSION)job->width + 2;
    if (last > job->scaled_width) last = job->scaled_width;
    JDIMENSION columns = last - first;
    if (columns < job->scaled_width) {
        jpeg_crop_scanline(cinfo, &first, &columns);
    }
    job->row_buffer = (unsigned char *)malloc((size_t)columns * 3 * ROWS_PER_READ);
    if (job->row_buffer == NULL) {
        job->status = NO_MEMORY;
        return;
    }
    if (job->y > 0) {
        jpeg_skip_scanlines(cinfo, (JDIMENSION)job->y);
    }
    size_t skip = ((size_t)job->x - first) * 3, row_bytes = (size_t)job->width * 3;
    size_t stride = (size_t)job->row_stride;
    JSAMPROW rows[ROWS_PER_READ];
    for (int k = 0; k < ROWS_PER_READ; k++) {
        rows[k] = job->row_buffer + (size_t)k * columns * 3;
    }
    JDIMENSION row = 0;
    while (row < (JDIMENSION)job->height) {
        JDIMENSION wanted = (JDIMENSION)job->height - row;
        JDIMENSION got = jpeg_read_scanlines(cinfo, rows, wanted < ROWS_PER_READ ? wanted : ROWS_PER_READ);
        if (got == 0) {
            strcpy(errors->message, "the decoder returned no row");
            job->status = FAILED;
            return;
        }
        for (JDIMENSION k = 0; k < got; k++) {
            memcpy(job->out + (size_t)(row + k) * stride, rows[k] + skip, row_bytes);
        }
        row += got;
    }
    if (job->whole) {
        jpeg_finish_decompress(cinfo);  /* reads on to the end-of-image marker */
    } else {
        jpeg_abort_decompress(cinfo);  /* rows below the region are never decoded */
    }
}

/* Runs one job without the GIL; on return its status says how it went. */
static void run(Job *job, ErrorManager *errors) {
    struct jpeg_decompress_struct cinfo;
    volatile int created = 0;
    cinfo.err = jpeg_std_error(&errors->pub);
    errors->pub.error_exit = on_error;
    errors->pub.emit_message = on_message;
    errors->message[0] = '\0';
    job->status = DONE;
    job->row_buffer = NULL;
    if (setjmp(errors->escape)) {
        job->status = FAILED;
    } else {
        jpeg_create_decompress(&cinfo);
        created = 1;
        if (prepare(&cinfo, job)) {
            read_rows(&cinfo, job, errors);
        }
    }
    if (created) {
        jpeg_destroy_decompress(&cinfo);
    }
    free(job->row_buffer);
    job->row_buffer = NULL;
}

/* The job's result: the scaled size, or the exception its status calls for. */
static PyObject *finish(Job *job, ErrorManager *errors) {
    switch (job->status) {
    case FAILED:
        return PyErr_Format(PyExc_ValueError, "cannot decode the JPEG: %s", errors->message);
    case NO_END:
        return PyErr_Format(PyExc_ValueError, "cannot decode the JPEG: its scan is not followed by the "
                            "end-of-image marker (the file is cut, or holds more after its scan)");
    case UNSUPPORTED:
        PyErr_SetString(UnsupportedJpeg, "a CMYK or YCCK JPEG: libjpeg-turbo does not convert it to RGB");
        return NULL;
    case BAD_SCALE:
        return PyErr_Format(PyExc_ValueError, "scale %d/8 is not one of libjpeg-turbo's (1/8 to 16/8)",
                            job->scale_num);
    case BAD_REGION:
        return PyErr_Format(PyExc_ValueError, "region %dx%d at (%d, %d) is outside the %ux%u image at "
                            "scale %d/8", job->width, job->height, job->x, job->y, job->scaled_width,
                            job->scaled_height, job->whole ? 8 : job->scale_num);
    case TOO_SMALL:
        return PyErr_Format(PyExc_ValueError, "out holds %zu bytes with rows %zd bytes apart; the %dx%d "
                            "region needs rows of at least %d bytes and %zu bytes", job->out_length,
                            job->row_stride, job->width, job->height, job->width * 3,
                            (size_t)(job->height - 1) * (size_t)job->row_stride + (size_t)job->width * 3);
    case NO_MEMORY:
        return PyErr_NoMemory();
    default:
        return Py_BuildValue("(II)", job->scaled_width, job->scaled_height);
    }
}

static PyObject *decode(Py_buffer *data, Py_buffer *out, Job *job) {
    ErrorManager errors;
    job->data = (const unsigned char *)data->buf;
    job->length = (size_t)data->len;
    job->out = (unsigned char *)out->buf;
    job->out_length = (size_t)out->len;
    Py_BEGIN_ALLOW_THREADS
    run(job, &errors);
    Py_END_ALLOW_THREADS
    PyObject *result = finish(job, &errors);
    PyBuffer_Release(data);
    PyBuffer_Release(out);
    return result;
}

PyDoc_STRVAR(decode_region_doc,
"decode_region(data, scale_num, x, y, width, height, out, row_stride=0) -> (scaled_width, scaled_height)\n"
"\n"
"Decode the region [x, x + width) x [y, y + height) of the JPEG ``data`` at\n"
"scale ``scale_num``/8 (coordinates in the scaled image) as RGB rows into\n"
"``out``, a writable buffer: row ``r`` at byte ``r * row_stride`` (0 means\n"
"``width * 3``, packed rows), so a region can be written into a larger image.\n"
"Raises UnsupportedJpeg for colour spaces libjpeg-turbo cannot turn into RGB\n"
"(CMYK, YCCK) and ValueError for a scale outside 1 to 16, corrupt data, a\n"
"region outside the image, or a file of one scan whose scan is not followed by\n"
"the end-of-image marker.");

static PyObject *decode_region(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data, out;
    Job job = {0};
    if (!PyArg_ParseTuple(args, "y*iiiiiw*|n", &data, &job.scale_num, &job.x, &job.y, &job.width,
                          &job.height, &out, &job.row_stride)) {
        return NULL;
    }
    return decode(&data, &out, &job);
}

PyDoc_STRVAR(decode_image_doc,
"decode_image(data, out) -> (width, height)\n"
"\n"
"Decode the whole JPEG ``data`` at full scale as packed RGB rows into ``out``,\n"
"a writable buffer of at least ``width * height * 3`` bytes, reading on to\n"
"the end-of-image marker. Raises as decode_region does; warnings about corrupt\n"
"data are tolerated, data that ends before the image does is a ValueError.");

static PyObject *decode_image(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data, out;
    Job job = {0};
    job.whole = 1;
    if (!PyArg_ParseTuple(args, "y*w*", &data, &out)) {
        return NULL;
    }
    return decode(&data, &out, &job);
}

/* Interleaved RGB rows to three planes: what the loader's channel-first batch slots hold. The
 * crop comes out of torch's resize channels-last; its copy into the slot is a de-interleave,
 * which SSSE3 shuffles do about five times faster than plain SSE2 code (and torch's strided
 * copy), so GCC builds both and picks one when the module loads. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)  /* needs ifunc */
#define DATAKIT_SIMD_CLONES __attribute__((target_clones("default", "ssse3")))
#else
#define DATAKIT_SIMD_CLONES
#endif

DATAKIT_SIMD_CLONES
static void copy_planar(const unsigned char *restrict src, size_t row_stride, size_t height, size_t width,
                        unsigned char *restrict out, int mirror) {
    size_t plane = height * width;
    for (size_t y = 0; y < height; y++) {
        const unsigned char *restrict row = src + y * row_stride;
        unsigned char *restrict r = out + y * width, *restrict g = r + plane, *restrict b = g + plane;
        if (mirror) {
            for (size_t x = 0; x < width; x++) {
                r[width - 1 - x] = row[3 * x];
                g[width - 1 - x] = row[3 * x + 1];
                b[width - 1 - x] = row[3 * x + 2];
            }
        } else {
            for (size_t x = 0; x < width; x++) {
                r[x] = row[3 * x];
                g[x] = row[3 * x + 1];
                b[x] = row[3 * x + 2];
            }
        }
    }
}

PyDoc_STRVAR(to_planar_doc,
"to_planar(src, row_stride, height, width, out, mirror) -> None\n"
"\n"
"Copy ``height`` x ``width`` RGB pixels (row ``r`` at byte ``r * row_stride``\n"
"of ``src``) into ``out`` as three planes, channel-first (``3 * height * width``\n"
"bytes), each row mirrored left to right when ``mirror`` is true.");

static PyObject *to_planar(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer src, out;
    Py_ssize_t row_stride, height, width;
    int mirror;
    if (!PyArg_ParseTuple(args, "y*nnnw*p", &src, &row_stride, &height, &width, &out, &mirror)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (height <= 0 || width <= 0 || row_stride < width * 3) {
        PyErr_Format(PyExc_ValueError, "a %zdx%zd image cannot have rows %zd bytes apart", height, width, row_stride);
    } else if (src.len < (height - 1) * row_stride + width * 3 || out.len < 3 * height * width) {
        PyErr_Format(PyExc_ValueError, "%zdx%zd pixels need %zd bytes of source (%zd given) and %zd of output "
                     "(%zd given)", height, width, (height - 1) * row_stride + width * 3, src.len,
                     3 * height * width, out.len);
    } else {
        Py_BEGIN_ALLOW_THREADS
        copy_planar((const unsigned char *)src.buf, (size_t)row_stride, (size_t)height, (size_t)width,
                    (unsigned char *)out.buf, mirror);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS, decode_region_doc},
    {"decode_image", decode_image, METH_VARARGS, decode_image_doc},
    {"to_planar", to_planar, METH_VARARGS, to_planar_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "datakit.format._jpeg",
    "JPEG decoding with libjpeg-turbo: regions (decode_region) and whole images (decode_image).", -1,
    methods, NULL, NULL, NULL, NULL,
};

#define DATAKIT_STRINGIFY_(token) #token
#define DATAKIT_STRINGIFY(token) DATAKIT_STRINGIFY_(token)

PyMODINIT_FUNC PyInit__jpeg(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    UnsupportedJpeg = PyErr_NewException("datakit.format._jpeg.UnsupportedJpeg", PyExc_ValueError, NULL);
    if (UnsupportedJpeg == NULL || PyModule_AddObjectRef(m, "UnsupportedJpeg", UnsupportedJpeg) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#ifdef LIBJPEG_TURBO_VERSION
    if (PyModule_AddStringConstant(m, "LIBJPEG_TURBO_VERSION", DATAKIT_STRINGIFY(LIBJPEG_TURBO_VERSION)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
