/* Direct launch's per-call path in C (built by runtime/c_launcher.py, loaded as dynamo_nvf._nvf_launcher).
 *
 * Why C: from Python, a direct call spent ~8.5 us (H100, 2026-11-24) checking inputs, allocating
 * outputs, patching pointers and calling cuLaunchKernel through ctypes; the same steps through the
 * C API leave the allocations (torch's caching allocator) and the driver's own launch cost.
 *
 * Only Python's C API is used (no torch headers, no libcuda link), so it builds in a fraction of a
 * second with the C compiler Triton needs anyway. The driver entry points arrive as addresses, so a
 * CPU test can pass a recording stand-in.
 *
 * A Launcher is called with the region's input tuple and returns the list of outputs, or None when a
 * call is not one the replayed kernels were built for: the caller then runs fec.execute, and
 * `last_decline` says why. Per call it checks what the kernels' grid sizes, extents, scalar arguments
 * and vectorised accesses were derived from: each input's sizes, strides, dtype and device, its data
 * pointer divisible by the alignment nvFuser keyed on at build, and inputs that shared a pointer still
 * sharing it. It launches on the build's device and its current stream, in the device's primary
 * context (made current for the call where another device is current, and where the thread has no
 * context yet, e.g. autograd's worker threads). The GIL is held throughout, so the argument bytes
 * cannot be rewritten by another thread before the driver has copied them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int (*launch_fn)(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned smem, void *stream, void **params, void **extra);
typedef int (*cooperative_fn)(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                              unsigned bz, unsigned smem, void *stream, void **params);
typedef int (*memset_fn)(unsigned long long dst, unsigned char value, size_t bytes, void *stream);
typedef int (*ctx_get_fn)(void **context);
typedef int (*ctx_set_fn)(void *context);

#define MAX_TENSORS 256

/* Why a call declined (index into decline_names; DECLINE_NONE: it did not). */
enum {
    DECLINE_NONE, DECLINE_COUNT, DECLINE_SIZES, DECLINE_STRIDES, DECLINE_DTYPE, DECLINE_DEVICE, DECLINE_ALIGNMENT,
    DECLINE_SHARED, DECLINE_ALLOCATION, DECLINE_CONTEXT, N_DECLINES
};
static const char *decline_names[N_DECLINES] = {
    "", "another number of inputs", "an input of other sizes", "an input of other strides",
    "an input of another dtype", "an input on another device",
    "an input less aligned than nvFuser's kernel was built for", "inputs that shared a data pointer at build no longer do",
    "an output or work buffer less aligned than at build", "another CUDA context is current",
};

typedef struct {
    void *function;
    unsigned dims[7]; /* grid x, y, z; block x, y, z; dynamic shared memory */
    Py_ssize_t n_params;
    char *storage;  /* every argument's bytes */
    void **params;  /* kernelParams: one pointer per argument into storage */
    Py_ssize_t *slots; /* per argument: which tensor's data pointer starts it (index into the call's table) */
    int cooperative;   /* launched with cuLaunchCooperativeKernel (its grid synchronises) */
} Kernel;

/* One byte range nvFuser's run zeroed: `bytes` from `offset` into work buffer `work`, before kernel `before`. */
typedef struct {
    Py_ssize_t before, work;
    size_t offset, bytes;
} Zeroing;

typedef struct {
    PyObject_HEAD
    launch_fn launch;
    cooperative_fn launch_cooperative;
    memset_fn memset_async;
    ctx_get_fn ctx_get;
    ctx_set_fn ctx_set;
    void *context;           /* the build device's primary context (the kernels' modules live in it) */
    Kernel *kernels;
    Py_ssize_t n_kernels;
    long device;
    PyObject *device_object; /* the device index as an int, for get_stream and exchange_device */
    Py_ssize_t n_inputs, n_outputs, n_work;
    PyObject *input_sizes;   /* tuple of each input's size() at build */
    PyObject *input_strides; /* tuple of each input's stride() at build */
    PyObject *input_dtypes;  /* tuple of each input's dtype at build (torch.dtype objects are singletons) */
    unsigned long long *alignment; /* per tensor (inputs, outputs, work): its data pointer's required divisor */
    Py_ssize_t *same_as;     /* per input: the first input that had the same data pointer at build */
    PyObject *output_args;   /* tuple of (shape, strides, dtype) argument tuples for `empty` */
    PyObject *work_args;     /* the same for the one allocation holding every work buffer (or empty) */
    Py_ssize_t *work_offsets; /* per work buffer: its byte offset into that allocation */
    Zeroing *zeros;          /* byte ranges to zero, in the build's order */
    Py_ssize_t n_zeros;
    PyObject *empty, *get_device, *exchange_device, *get_stream;
    PyObject *owner; /* keeps nvFuser's executor cache (the kernels' modules) alive */
    long long launches;
    long long declines[N_DECLINES];
    PyObject *last_decline;  /* a str: the last declined call's reason and input */
} Launcher;

static PyObject *data_ptr_name, *stride_name, *size_name, *dtype_name, *get_device_name;

static int fetch_pointer(PyObject *tensor, unsigned long long *pointer) {
    PyObject *value = PyObject_CallMethodNoArgs(tensor, data_ptr_name);
    if (value == NULL) return -1;
    *pointer = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    return PyErr_Occurred() ? -1 : 0;
}

static void Launcher_dealloc(Launcher *self) {
    Py_XDECREF(self->input_sizes);
    Py_XDECREF(self->input_strides);
    Py_XDECREF(self->input_dtypes);
    Py_XDECREF(self->output_args);
    Py_XDECREF(self->work_args);
    Py_XDECREF(self->empty);
    Py_XDECREF(self->get_device);
    Py_XDECREF(self->exchange_device);
    Py_XDECREF(self->get_stream);
    Py_XDECREF(self->owner);
    Py_XDECREF(self->device_object);
    Py_XDECREF(self->last_decline);
    for (Py_ssize_t k = 0; k < self->n_kernels && self->kernels != NULL; k++) {
        PyMem_Free(self->kernels[k].storage);
        PyMem_Free(self->kernels[k].params);
        PyMem_Free(self->kernels[k].slots);
    }
    PyMem_Free(self->kernels);
    PyMem_Free(self->same_as);
    PyMem_Free(self->alignment);
    PyMem_Free(self->work_offsets);
    PyMem_Free(self->zeros);
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

/* One kernel from (function, dims, arguments, slots, cooperative): `arguments` a list of bytes per
 * kernel parameter, each starting with a data pointer; `slots` which tensor's pointer goes there, or -1
 * for a constant (a scalar parameter, whose bytes stay as given). */
static int Kernel_init(Kernel *kernel, PyObject *spec, Py_ssize_t n_tensors) {
    unsigned long long function;
    PyObject *dims, *arguments, *slots;
    int cooperative;
    if (!PyArg_ParseTuple(spec, "KO!O!O!p", &function, &PyTuple_Type, &dims, &PyList_Type, &arguments, &PyTuple_Type,
                          &slots, &cooperative))
        return -1;
    kernel->cooperative = cooperative;
    Py_ssize_t n_params = PyList_GET_SIZE(arguments);
    if (PyTuple_GET_SIZE(dims) != 7 || PyTuple_GET_SIZE(slots) != n_params) {
        PyErr_SetString(PyExc_ValueError, "Launcher: a kernel needs 7 dims and one slot per argument");
        return -1;
    }
    kernel->function = (void *)(uintptr_t)function;
    for (int i = 0; i < 7; i++) {
        kernel->dims[i] = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(dims, i));
    }
    if (PyErr_Occurred()) return -1;
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n_params; i++) {
        PyObject *raw = PyList_GET_ITEM(arguments, i);
        Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
        if (slot == -1 && PyErr_Occurred()) return -1;
        /* a tensor's bytes start with its data pointer; a constant (slot -1) is any size */
        if (!PyBytes_Check(raw) || (slot != -1 && PyBytes_GET_SIZE(raw) < 8) || PyBytes_GET_SIZE(raw) == 0) {
            PyErr_SetString(PyExc_ValueError, "Launcher: each argument is bytes starting with a data pointer");
            return -1;
        }
        total += ((size_t)PyBytes_GET_SIZE(raw) + 15) & ~(size_t)15;
    }
    kernel->storage = PyMem_Calloc(total ? total : 16, 1);
    kernel->params = PyMem_Calloc(n_params ? n_params : 1, sizeof(void *));
    kernel->slots = PyMem_Calloc(n_params ? n_params : 1, sizeof(Py_ssize_t));
    if (kernel->storage == NULL || kernel->params == NULL || kernel->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    kernel->n_params = n_params;
    size_t offset = 0;
    for (Py_ssize_t i = 0; i < n_params; i++) {
        PyObject *raw = PyList_GET_ITEM(arguments, i);
        memcpy(kernel->storage + offset, PyBytes_AS_STRING(raw), (size_t)PyBytes_GET_SIZE(raw));
        kernel->params[i] = kernel->storage + offset;
        offset += ((size_t)PyBytes_GET_SIZE(raw) + 15) & ~(size_t)15;
        Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
        if (slot < -1 || slot >= n_tensors) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Launcher: a slot out of range");
            return -1;
        }
        kernel->slots[i] = slot;
    }
    return 0;
}

/* Launcher(driver, context, kernels, device, inputs, output_args, work_args, work_offsets, alignment,
 *          zeros, empty, get_device, exchange_device, get_stream, owner)
 * `driver`: the addresses of cuLaunchKernel, cuLaunchCooperativeKernel, cuMemsetD8Async,
 * cuCtxGetCurrent and cuCtxSetCurrent; `context` the device's primary context.
 * `kernels` lists (function, dims, arguments, slots, cooperative) in launch order; slots index the
 * call's tensors: inputs, then outputs, then work buffers. `inputs` holds per input (sizes, strides,
 * dtype, same_as): inputs that shared a data pointer at build (views of one tensor) share a slot, so a
 * call whose inputs do not share it declines. The work buffers are slices of one allocation per call
 * (`work_args`: its `empty` arguments, none without work buffers) at `work_offsets`. `alignment` per
 * tensor the divisor its data pointer needs; `zeros` the (before kernel, work buffer, offset, bytes)
 * ranges to zero, in order. */
static PyObject *Launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    unsigned long long launch, cooperative_address, memset_address, ctx_get_address, ctx_set_address, context;
    PyObject *kernels, *inputs, *output_args, *work_args, *work_offsets, *alignment, *zeros;
    PyObject *empty, *get_device, *exchange_device, *get_stream, *owner;
    long device;
    if (!PyArg_ParseTuple(args, "(KKKKK)KO!lO!O!O!O!O!O!OOOOO", &launch, &cooperative_address, &memset_address,
                          &ctx_get_address, &ctx_set_address, &context, &PyList_Type, &kernels, &device,
                          &PyTuple_Type, &inputs, &PyTuple_Type, &output_args, &PyTuple_Type, &work_args,
                          &PyTuple_Type, &work_offsets, &PyTuple_Type, &alignment, &PyTuple_Type, &zeros,
                          &empty, &get_device, &exchange_device, &get_stream, &owner))
        return NULL;
    Py_ssize_t n_inputs = PyTuple_GET_SIZE(inputs);
    Py_ssize_t n_outputs = PyTuple_GET_SIZE(output_args), n_work = PyTuple_GET_SIZE(work_offsets);
    Py_ssize_t n_tensors = n_inputs + n_outputs + n_work;
    if (PyTuple_GET_SIZE(alignment) != n_tensors || n_tensors > MAX_TENSORS || n_outputs < 1 ||
        PyList_GET_SIZE(kernels) < 1 || PyTuple_GET_SIZE(work_args) != (n_work ? 1 : 0)) {
        PyErr_SetString(PyExc_ValueError, "Launcher: inconsistent argument counts");
        return NULL;
    }
    if (launch == 0 || ctx_get_address == 0 || ctx_set_address == 0 || context == 0 ||
        (PyTuple_GET_SIZE(zeros) > 0 && memset_address == 0)) {
        PyErr_SetString(PyExc_ValueError, "Launcher: missing driver entry point or context");
        return NULL;
    }
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->launch = (launch_fn)(uintptr_t)launch;
    self->launch_cooperative = (cooperative_fn)(uintptr_t)cooperative_address;
    self->memset_async = (memset_fn)(uintptr_t)memset_address;
    self->ctx_get = (ctx_get_fn)(uintptr_t)ctx_get_address;
    self->ctx_set = (ctx_set_fn)(uintptr_t)ctx_set_address;
    self->context = (void *)(uintptr_t)context;
    self->device = device;
    self->device_object = PyLong_FromLong(device);
    self->n_inputs = n_inputs;
    self->n_outputs = n_outputs;
    self->n_work = n_work;
    self->input_sizes = PyTuple_New(n_inputs);
    self->input_strides = PyTuple_New(n_inputs);
    self->input_dtypes = PyTuple_New(n_inputs);
    Py_INCREF(output_args); self->output_args = output_args;
    Py_INCREF(work_args); self->work_args = work_args;
    Py_INCREF(empty); self->empty = empty;
    Py_INCREF(get_device); self->get_device = get_device;
    Py_INCREF(exchange_device); self->exchange_device = exchange_device;
    Py_INCREF(get_stream); self->get_stream = get_stream;
    Py_INCREF(owner); self->owner = owner;
    self->last_decline = PyUnicode_FromString("");
    if (self->device_object == NULL || self->input_sizes == NULL || self->input_strides == NULL ||
        self->input_dtypes == NULL || self->last_decline == NULL)
        goto fail;
    self->same_as = PyMem_Calloc(n_inputs ? n_inputs : 1, sizeof(Py_ssize_t));
    self->alignment = PyMem_Calloc(n_tensors ? n_tensors : 1, sizeof(unsigned long long));
    self->work_offsets = PyMem_Calloc(n_work ? n_work : 1, sizeof(Py_ssize_t));
    self->n_zeros = PyTuple_GET_SIZE(zeros);
    self->zeros = PyMem_Calloc(self->n_zeros ? self->n_zeros : 1, sizeof(Zeroing));
    if (self->same_as == NULL || self->alignment == NULL || self->work_offsets == NULL || self->zeros == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t w = 0; w < n_work; w++) {
        self->work_offsets[w] = PyLong_AsSsize_t(PyTuple_GET_ITEM(work_offsets, w));
        if (self->work_offsets[w] == -1 && PyErr_Occurred()) goto fail;
        if (self->work_offsets[w] < 0) {
            PyErr_SetString(PyExc_ValueError, "Launcher: a work buffer offset is negative");
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < n_inputs; i++) {
        PyObject *sizes, *strides, *dtype;
        Py_ssize_t first;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(inputs, i), "O!O!On", &PyTuple_Type, &sizes, &PyTuple_Type, &strides,
                              &dtype, &first))
            goto fail;
        if (first < 0 || first > i) {
            PyErr_SetString(PyExc_ValueError, "Launcher: same_as names an earlier input");
            goto fail;
        }
        self->same_as[i] = first;
        Py_INCREF(sizes); PyTuple_SET_ITEM(self->input_sizes, i, sizes);
        Py_INCREF(strides); PyTuple_SET_ITEM(self->input_strides, i, strides);
        Py_INCREF(dtype); PyTuple_SET_ITEM(self->input_dtypes, i, dtype);
    }
    for (Py_ssize_t i = 0; i < n_tensors; i++) {
        unsigned long long divisor = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(alignment, i));
        if (PyErr_Occurred()) goto fail;
        if (divisor == 0 || (divisor & (divisor - 1))) {
            PyErr_SetString(PyExc_ValueError, "Launcher: an alignment is a power of two");
            goto fail;
        }
        self->alignment[i] = divisor;
    }
    Py_ssize_t n_kernels = PyList_GET_SIZE(kernels);
    for (Py_ssize_t z = 0; z < self->n_zeros; z++) {
        Zeroing *zero = &self->zeros[z];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(zeros, z), "nnnn", &zero->before, &zero->work, &zero->offset,
                              &zero->bytes))
            goto fail;
        if (zero->before < 0 || zero->before >= n_kernels || zero->work < 0 || zero->work >= n_work ||
            (z > 0 && zero->before < self->zeros[z - 1].before)) {
            PyErr_SetString(PyExc_ValueError, "Launcher: a zeroed range names no kernel or work buffer, or is out of order");
            goto fail;
        }
    }
    self->kernels = PyMem_Calloc(n_kernels, sizeof(Kernel));
    if (self->kernels == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    self->n_kernels = n_kernels;
    for (Py_ssize_t k = 0; k < n_kernels; k++) {
        PyObject *spec = PyList_GET_ITEM(kernels, k);
        if (!PyTuple_Check(spec)) {
            PyErr_SetString(PyExc_TypeError, "Launcher: each kernel is a tuple");
            goto fail;
        }
        if (Kernel_init(&self->kernels[k], spec, n_tensors) < 0) goto fail;
        if (self->kernels[k].cooperative && self->launch_cooperative == NULL) {
            PyErr_SetString(PyExc_ValueError, "Launcher: a cooperative kernel without cuLaunchCooperativeKernel");
            goto fail;
        }
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* A list of `empty(*args)` for each argument tuple in `arguments`, their data pointers written to
 * `pointers`; NULL with an exception set on failure. */
static PyObject *allocate(PyObject *empty, PyObject *arguments, unsigned long long *pointers) {
    Py_ssize_t count = PyTuple_GET_SIZE(arguments);
    PyObject *tensors = PyList_New(count);
    if (tensors == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *tensor = PyObject_Call(empty, PyTuple_GET_ITEM(arguments, i), NULL);
        if (tensor == NULL) goto fail;
        PyList_SET_ITEM(tensors, i, tensor);
        if (fetch_pointer(tensor, &pointers[i]) < 0) goto fail;
    }
    return tensors;
fail:
    Py_DECREF(tensors);
    return NULL;
}

/* 0 when `value` equals the build's `expected` (a comparison of two tuples of ints), 1 when not, -1 on error. */
static int differs(PyObject *tensor, PyObject *method, PyObject *expected) {
    PyObject *value = PyObject_CallMethodNoArgs(tensor, method);
    if (value == NULL) return -1;
    int same = PyObject_RichCompareBool(value, expected, Py_EQ);
    Py_DECREF(value);
    return same < 0 ? -1 : !same;
}

/* Checks input i; DECLINE_NONE when it is as at build, -1 on error. */
static int check_input(Launcher *self, PyObject *tensor, Py_ssize_t i, unsigned long long *pointers) {
    if (fetch_pointer(tensor, &pointers[i]) < 0) return -1;
    if (pointers[i] & (self->alignment[i] - 1)) return DECLINE_ALIGNMENT;
    if (pointers[i] != pointers[self->same_as[i]]) return DECLINE_SHARED;
    int result = differs(tensor, stride_name, PyTuple_GET_ITEM(self->input_strides, i));
    if (result) return result < 0 ? -1 : DECLINE_STRIDES;
    result = differs(tensor, size_name, PyTuple_GET_ITEM(self->input_sizes, i));
    if (result) return result < 0 ? -1 : DECLINE_SIZES;
    PyObject *dtype = PyObject_GetAttr(tensor, dtype_name);
    if (dtype == NULL) return -1;
    Py_DECREF(dtype); /* the build's dtype object keeps it alive: compared by identity */
    if (dtype != PyTuple_GET_ITEM(self->input_dtypes, i)) return DECLINE_DTYPE;
    PyObject *device = PyObject_CallMethodNoArgs(tensor, get_device_name);
    if (device == NULL) return -1;
    long index = PyLong_AsLong(device);
    Py_DECREF(device);
    if (index == -1 && PyErr_Occurred()) return -1;
    return index == self->device ? DECLINE_NONE : DECLINE_DEVICE;
}

static void note_decline(Launcher *self, int reason, Py_ssize_t input) {
    self->declines[reason]++;
    PyObject *text = input >= 0 ? PyUnicode_FromFormat("%s (input %zd)", decline_names[reason], input)
                                : PyUnicode_FromString(decline_names[reason]);
    if (text == NULL) {
        PyErr_Clear();
        return;
    }
    Py_SETREF(self->last_decline, text);
}

static PyObject *Launcher_call(Launcher *self, PyObject *call_args, PyObject *kwargs) {
    PyObject *inputs;
    if (!PyArg_ParseTuple(call_args, "O", &inputs)) return NULL;
    PyObject *fast = PySequence_Fast(inputs, "Launcher: inputs must be a sequence");
    if (fast == NULL) return NULL;
    PyObject *result = NULL, *outputs = NULL, *work = NULL, *value = NULL, *previous_device = NULL;
    unsigned long long pointers[MAX_TENSORS];
    Py_ssize_t n = self->n_inputs, bad_input = -1;
    int reason = DECLINE_COUNT;
    if (PySequence_Fast_GET_SIZE(fast) != n) goto decline;

    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        reason = check_input(self, items[i], i, pointers);
        if (reason < 0) goto done;
        if (reason != DECLINE_NONE) {
            bad_input = i;
            goto decline;
        }
    }

    /* The build's device current for the call (allocations, stream, context), as torch.cuda.device does. */
    value = PyObject_CallNoArgs(self->get_device);
    if (value == NULL) goto done;
    long current = PyLong_AsLong(value);
    Py_CLEAR(value);
    if (current == -1 && PyErr_Occurred()) goto done;
    if (current != self->device) {
        previous_device = PyObject_CallOneArg(self->exchange_device, self->device_object);
        if (previous_device == NULL) goto done;
    }
    /* The kernels' context: a thread whose first CUDA work this is has none current yet. */
    void *context = NULL;
    int status = self->ctx_get(&context);
    if (status != 0) {
        PyErr_Format(PyExc_RuntimeError, "cuCtxGetCurrent failed (CUresult %d)", status);
        goto done;
    }
    if (context != self->context) {
        if (context != NULL) {
            reason = DECLINE_CONTEXT;
            goto decline;
        }
        status = self->ctx_set(self->context);
        if (status != 0) {
            PyErr_Format(PyExc_RuntimeError, "cuCtxSetCurrent failed (CUresult %d)", status);
            goto done;
        }
    }

    outputs = allocate(self->empty, self->output_args, &pointers[n]);
    if (outputs == NULL) goto done;
    n += self->n_outputs;

    value = PyObject_CallOneArg(self->get_stream, self->device_object);
    if (value == NULL) goto done;
    void *stream = PyLong_AsVoidPtr(value);
    Py_CLEAR(value);
    if (PyErr_Occurred()) goto done;

    /* work buffers (one allocation) are kept until the launches are enqueued, then freed stream-ordered */
    if (self->n_work) {
        unsigned long long base;
        work = allocate(self->empty, self->work_args, &base);
        if (work == NULL) goto done;
        for (Py_ssize_t w = 0; w < self->n_work; w++)
            pointers[n + w] = base + (unsigned long long)self->work_offsets[w];
    }
    for (Py_ssize_t i = self->n_inputs; i < n + self->n_work; i++) {
        if (pointers[i] & (self->alignment[i] - 1)) {
            reason = DECLINE_ALLOCATION;
            goto decline;
        }
    }

    Py_ssize_t z = 0;
    for (Py_ssize_t k = 0; k < self->n_kernels; k++) {
        for (; z < self->n_zeros && self->zeros[z].before == k; z++) {
            Zeroing *zero = &self->zeros[z];
            status = self->memset_async(pointers[n + zero->work] + zero->offset, 0, zero->bytes, stream);
            if (status != 0) {
                PyErr_Format(PyExc_RuntimeError, "cuMemsetD8Async failed (CUresult %d)", status);
                goto done;
            }
        }
        Kernel *kernel = &self->kernels[k];
        for (Py_ssize_t i = 0; i < kernel->n_params; i++) {
            if (kernel->slots[i] >= 0) /* -1: a constant, the build's bytes */
                memcpy(kernel->params[i], &pointers[kernel->slots[i]], sizeof(unsigned long long));
        }
        unsigned *d = kernel->dims;
        status = kernel->cooperative
            ? self->launch_cooperative(kernel->function, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream,
                                       kernel->params)
            : self->launch(kernel->function, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, kernel->params, NULL);
        if (status != 0) {
            PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed (CUresult %d)", status);
            goto done;
        }
    }
    self->launches++;
    result = outputs;
    outputs = NULL;
    goto done;
decline:
    note_decline(self, reason, bad_input);
    Py_INCREF(Py_None);
    result = Py_None;
done:
    Py_XDECREF(value);
    Py_XDECREF(outputs);
    Py_XDECREF(work);
    Py_DECREF(fast);
    if (previous_device != NULL) { /* back to the caller's device, keeping any error of the call */
        PyObject *type, *error, *traceback;
        PyErr_Fetch(&type, &error, &traceback);
        PyObject *restored = PyObject_CallOneArg(self->exchange_device, previous_device);
        Py_DECREF(previous_device);
        if (restored == NULL) {
            Py_XDECREF(type); Py_XDECREF(error); Py_XDECREF(traceback);
            Py_XDECREF(result);
            return NULL;
        }
        Py_DECREF(restored);
        PyErr_Restore(type, error, traceback);
    }
    return result;
}

static PyObject *Launcher_get_launches(Launcher *self, void *closure) {
    return PyLong_FromLongLong(self->launches);
}

static PyObject *Launcher_get_dims(Launcher *self, void *closure) {
    PyObject *all = PyList_New(self->n_kernels);
    if (all == NULL) return NULL;
    for (Py_ssize_t k = 0; k < self->n_kernels; k++) {
        unsigned *d = self->kernels[k].dims;
        PyObject *one = Py_BuildValue("(III)(III)I", d[0], d[1], d[2], d[3], d[4], d[5], d[6]);
        if (one == NULL) {
            Py_DECREF(all);
            return NULL;
        }
        PyList_SET_ITEM(all, k, one);
    }
    return all;
}

static PyObject *Launcher_get_work_buffers(Launcher *self, void *closure) {
    return PyLong_FromSsize_t(self->n_work);
}

static PyObject *Launcher_get_zeroed(Launcher *self, void *closure) {
    return PyLong_FromSsize_t(self->n_zeros);
}

static PyObject *Launcher_get_last_decline(Launcher *self, void *closure) {
    Py_INCREF(self->last_decline);
    return self->last_decline;
}

static PyObject *Launcher_get_declines(Launcher *self, void *closure) {
    PyObject *all = PyDict_New();
    if (all == NULL) return NULL;
    for (int reason = 1; reason < N_DECLINES; reason++) {
        if (self->declines[reason] == 0) continue;
        PyObject *count = PyLong_FromLongLong(self->declines[reason]);
        if (count == NULL || PyDict_SetItemString(all, decline_names[reason], count) < 0) {
            Py_XDECREF(count);
            Py_DECREF(all);
            return NULL;
        }
        Py_DECREF(count);
    }
    return all;
}

static PyObject *Launcher_get_constants(Launcher *self, void *closure) {
    Py_ssize_t count = 0;
    for (Py_ssize_t k = 0; k < self->n_kernels; k++)
        for (Py_ssize_t i = 0; i < self->kernels[k].n_params; i++) count += self->kernels[k].slots[i] < 0;
    return PyLong_FromSsize_t(count);
}

static PyGetSetDef Launcher_getset[] = {
    {"constants", (getter)Launcher_get_constants, NULL, "scalar arguments launched with the build's bytes", NULL},
    {"launches", (getter)Launcher_get_launches, NULL, "calls that launched so far", NULL},
    {"zeroed", (getter)Launcher_get_zeroed, NULL, "byte ranges of work buffers zeroed per call", NULL},
    {"last_decline", (getter)Launcher_get_last_decline, NULL, "why the last declined call declined", NULL},
    {"declines", (getter)Launcher_get_declines, NULL, "declined calls by reason", NULL},
    {"work_buffers", (getter)Launcher_get_work_buffers, NULL, "work buffers allocated per call", NULL},
    {"dims", (getter)Launcher_get_dims, NULL, "per kernel: ((grid), (block), dynamic shared memory)", NULL},
    {NULL},
};

static PyType_Slot Launcher_slots[] = {
    {Py_tp_new, Launcher_new},
    {Py_tp_dealloc, Launcher_dealloc},
    {Py_tp_call, Launcher_call},
    {Py_tp_getset, Launcher_getset},
    {Py_tp_doc, "A region's kernels' launcher: call with the inputs; returns the outputs, or None to decline (last_decline says why)."},
    {0, NULL},
};

static PyType_Spec Launcher_spec = {
    "dynamo_nvf._nvf_launcher.Launcher", sizeof(Launcher), 0, Py_TPFLAGS_DEFAULT, Launcher_slots,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nvf_launcher", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__nvf_launcher(void) {
    data_ptr_name = PyUnicode_InternFromString("data_ptr");
    stride_name = PyUnicode_InternFromString("stride");
    size_name = PyUnicode_InternFromString("size");
    dtype_name = PyUnicode_InternFromString("dtype");
    get_device_name = PyUnicode_InternFromString("get_device");
    if (data_ptr_name == NULL || stride_name == NULL || size_name == NULL || dtype_name == NULL || get_device_name == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject *type = PyType_FromSpec(&Launcher_spec);
    if (type == NULL || PyModule_AddObject(m, "Launcher", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
