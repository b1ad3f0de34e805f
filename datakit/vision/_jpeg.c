/* Region decoding of JPEG files with libjpeg-turbo, for datakit.vision.
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
 * upsampling sees no neighbour there), so one more column is asked for on
 * each side, and each row is copied from the widened range into ``out``.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>

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

/* Warnings (corrupt data, a truncated file) are errors: a record that decodes
 * only with libjpeg's grey fill is corrupt, and the dataset must say so. */
static void on_message(j_common_ptr cinfo, int level) {
    if (level < 0) {
        on_error(cinfo);
    }
}

static PyObject *UnsupportedJpeg;

/* Rows asked of jpeg_read_scanlines at a time: one at a time costs about 5 % more (its per-call
 * work, and the upsampler's spare-row copy), measured on 300-500 px photos. */
#define ROWS_PER_READ 8

PyDoc_STRVAR(decode_region_doc,
"decode_region(data, scale_num, x, y, width, height, out, row_stride=0) -> (scaled_width, scaled_height)\n"
"\n"
"Decode the region [x, x + width) x [y, y + height) of the JPEG ``data`` at\n"
"scale ``scale_num``/8 (coordinates in the scaled image) as RGB rows into\n"
"``out``, a writable buffer: row ``r`` at byte ``r * row_stride`` (0 means\n"
"``width * 3``, packed rows), so a region can be written into a larger image.\n"
"Raises UnsupportedJpeg for colour spaces libjpeg-turbo cannot turn into RGB\n"
"(CMYK, YCCK) and ValueError for corrupt data or a region outside the image.");

static PyObject *decode_region(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data, out;
    int scale_num, x, y, width, height;
    Py_ssize_t row_stride = 0;
    if (!PyArg_ParseTuple(args, "y*iiiiiw*|n", &data, &scale_num, &x, &y, &width, &height, &out, &row_stride)) {
        return NULL;
    }
    if (width > 0 && row_stride == 0) {
        row_stride = (Py_ssize_t)width * 3;
    }
    struct jpeg_decompress_struct cinfo;
    ErrorManager errors;
    volatile int created = 0;
    PyObject *result = NULL;
    volatile int failed = 0, unsupported = 0, bad_region = 0, too_small = 0, no_memory = 0;
    volatile JDIMENSION scaled_width = 0, scaled_height = 0;
    unsigned char *volatile row_buffer = NULL;

    cinfo.err = jpeg_std_error(&errors.pub);
    errors.pub.error_exit = on_error;
    errors.pub.emit_message = on_message;
    errors.message[0] = '\0';

    Py_BEGIN_ALLOW_THREADS
    if (setjmp(errors.escape)) {
        failed = 1;
    } else {
        jpeg_create_decompress(&cinfo);
        created = 1;
        jpeg_mem_src(&cinfo, (const unsigned char *)data.buf, (unsigned long)data.len);
        jpeg_read_header(&cinfo, TRUE);
        if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
            unsupported = 1;
        } else {
            cinfo.scale_num = (unsigned int)scale_num;
            cinfo.scale_denom = 8;
            cinfo.out_color_space = JCS_EXT_RGB;
            cinfo.dct_method = JDCT_ISLOW;  /* Pillow's default: the same pixels */
            jpeg_calc_output_dimensions(&cinfo);
            scaled_width = cinfo.output_width;
            scaled_height = cinfo.output_height;
            if (x < 0 || y < 0 || width <= 0 || height <= 0 || (JDIMENSION)x + (JDIMENSION)width > scaled_width
                    || (JDIMENSION)y + (JDIMENSION)height > scaled_height) {
                bad_region = 1;
            } else if (row_stride < (Py_ssize_t)width * 3
                       || out.len < (Py_ssize_t)(height - 1) * row_stride + (Py_ssize_t)width * 3) {
                too_small = 1;
            } else {
                jpeg_start_decompress(&cinfo);
                /* one column of margin on each side, see the top of this file */
                JDIMENSION first = x > 0 ? (JDIMENSION)x - 1 : 0;
                JDIMENSION last = (JDIMENSION)x + (JDIMENSION)width + 1;
                if (last > scaled_width) last = scaled_width;
                JDIMENSION columns = last - first;
                if (columns < scaled_width) {
                    jpeg_crop_scanline(&cinfo, &first, &columns);
                }
                row_buffer = (unsigned char *)malloc((size_t)columns * 3 * ROWS_PER_READ);
                if (row_buffer == NULL) {
                    no_memory = 1;
                } else {
                    if (y > 0) {
                        jpeg_skip_scanlines(&cinfo, (JDIMENSION)y);
                    }
                    unsigned char *target = (unsigned char *)out.buf;
                    size_t skip = ((size_t)x - first) * 3, row_bytes = (size_t)width * 3;
                    size_t stride = (size_t)row_stride;
                    JSAMPROW rows[ROWS_PER_READ];
                    for (int k = 0; k < ROWS_PER_READ; k++) {
                        rows[k] = row_buffer + (size_t)k * columns * 3;
                    }
                    JDIMENSION row = 0;
                    while (row < (JDIMENSION)height) {
                        JDIMENSION wanted = (JDIMENSION)height - row;
                        JDIMENSION got = jpeg_read_scanlines(&cinfo, rows, wanted < ROWS_PER_READ ? wanted : ROWS_PER_READ);
                        if (got == 0) {
                            strcpy(errors.message, "the decoder returned no row");
                            failed = 1;
                            break;
                        }
                        for (JDIMENSION k = 0; k < got; k++) {
                            memcpy(target + (size_t)(row + k) * stride, rows[k] + skip, row_bytes);
                        }
                        row += got;
                    }
                    jpeg_abort_decompress(&cinfo);  /* rows below the region are never decoded */
                }
            }
        }
    }
    if (created) {
        jpeg_destroy_decompress(&cinfo);
    }
    free(row_buffer);
    Py_END_ALLOW_THREADS

    if (failed) {
        PyErr_Format(PyExc_ValueError, "cannot decode the JPEG: %s", errors.message);
    } else if (unsupported) {
        PyErr_SetString(UnsupportedJpeg, "a CMYK or YCCK JPEG: libjpeg-turbo does not convert it to RGB");
    } else if (bad_region) {
        PyErr_Format(PyExc_ValueError, "region %dx%d at (%d, %d) is outside the %ux%u image at scale %d/8",
                     width, height, x, y, scaled_width, scaled_height, scale_num);
    } else if (too_small) {
        PyErr_Format(PyExc_ValueError, "out holds %zd bytes with rows %zd bytes apart; the %dx%d region "
                     "needs rows of at least %d bytes and %zd bytes", out.len, row_stride, width, height,
                     width * 3, (Py_ssize_t)(height - 1) * row_stride + (Py_ssize_t)width * 3);
    } else if (no_memory) {
        PyErr_NoMemory();
    } else {
        result = Py_BuildValue("(II)", scaled_width, scaled_height);
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    return result;
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
    {"to_planar", to_planar, METH_VARARGS, to_planar_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "datakit.vision._jpeg",
    "Region decoding of JPEG files with libjpeg-turbo (see decode_region).", -1, methods,
    NULL, NULL, NULL, NULL,
};

/* The libjpeg-turbo release whose headers this module was compiled against (datakit.info()
 * reports it); libjpeg's API has no call that names the release loaded at run time. */
#define DATAKIT_STRINGIFY_(token) #token
#define DATAKIT_STRINGIFY(token) DATAKIT_STRINGIFY_(token)

PyMODINIT_FUNC PyInit__jpeg(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    UnsupportedJpeg = PyErr_NewException("datakit.vision._jpeg.UnsupportedJpeg", PyExc_ValueError, NULL);
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
