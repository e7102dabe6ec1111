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
 * A Launcher is called with the region's input tuple and returns the list of outputs, or None when an
 * input is not laid out as at build time (or another device is current): the caller then runs
 * fec.execute. The GIL is held throughout, so the argument bytes cannot be rewritten by another
 * thread before the driver has copied them.
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

#define MAX_TENSORS 256

typedef struct {
    void *function;
    unsigned dims[7]; /* grid x, y, z; block x, y, z; dynamic shared memory */
    Py_ssize_t n_params;
    char *storage;  /* every argument's bytes */
    void **params;  /* kernelParams: one pointer per argument into storage */
    Py_ssize_t *slots; /* per argument: which tensor's data pointer starts it (index into the call's table) */
    int cooperative;   /* launched with cuLaunchCooperativeKernel (its grid synchronises) */
} Kernel;

typedef struct {
    PyObject_HEAD
    launch_fn launch;
    cooperative_fn launch_cooperative;
    memset_fn memset_async;
    Kernel *kernels;
    Py_ssize_t n_kernels;
    long device;
    PyObject *device_object; /* the device index as an int, for get_stream */
    Py_ssize_t n_inputs, n_outputs, n_work;
    PyObject *input_strides; /* tuple of each input's stride() */
    PyObject *aligned;       /* tuple of bools: input pointer was 16-byte aligned at build */
    Py_ssize_t *same_as;     /* per input: the first input that had the same data pointer at build */
    PyObject *output_args;   /* tuple of (shape, strides, dtype) argument tuples for `empty` */
    PyObject *work_args;     /* the same for each work buffer */
    size_t *work_zero;       /* per work buffer: bytes to zero before the first kernel (0: none) */
    PyObject *empty, *get_device, *get_stream;
    PyObject *owner; /* keeps nvFuser's executor cache (the kernels' modules) alive */
    long long launches;
} Launcher;

static PyObject *data_ptr_name, *stride_name;

static int fetch_pointer(PyObject *tensor, unsigned long long *pointer) {
    PyObject *value = PyObject_CallMethodNoArgs(tensor, data_ptr_name);
    if (value == NULL) return -1;
    *pointer = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    return PyErr_Occurred() ? -1 : 0;
}

static void Launcher_dealloc(Launcher *self) {
    Py_XDECREF(self->input_strides);
    Py_XDECREF(self->aligned);
    Py_XDECREF(self->output_args);
    Py_XDECREF(self->work_args);
    Py_XDECREF(self->empty);
    Py_XDECREF(self->get_device);
    Py_XDECREF(self->get_stream);
    Py_XDECREF(self->owner);
    Py_XDECREF(self->device_object);
    for (Py_ssize_t k = 0; k < self->n_kernels && self->kernels != NULL; k++) {
        PyMem_Free(self->kernels[k].storage);
        PyMem_Free(self->kernels[k].params);
        PyMem_Free(self->kernels[k].slots);
    }
    PyMem_Free(self->kernels);
    PyMem_Free(self->same_as);
    PyMem_Free(self->work_zero);
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

/* Launcher(launch, launch_cooperative, memset, kernels, device, n_inputs, input_strides, aligned, same_as, output_args,
 *          work_args, work_zero, empty, get_device, get_stream, owner)
 * `kernels` lists (function, dims, arguments, slots) in launch order; slots index the call's tensors:
 * inputs, then outputs, then work buffers. Inputs that shared a data pointer at build (views of one
 * tensor) share a slot, so a call whose inputs do not share it declines. */
static PyObject *Launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    unsigned long long launch, cooperative_address, memset_address;
    PyObject *kernels, *input_strides, *aligned, *same_as, *output_args, *work_args, *work_zero;
    PyObject *empty, *get_device, *get_stream, *owner;
    long device;
    Py_ssize_t n_inputs;
    if (!PyArg_ParseTuple(args, "KKKO!lnO!O!O!O!O!O!OOOO", &launch, &cooperative_address, &memset_address,
                          &PyList_Type, &kernels,
                          &device, &n_inputs, &PyTuple_Type, &input_strides, &PyTuple_Type, &aligned, &PyTuple_Type,
                          &same_as, &PyTuple_Type, &output_args, &PyTuple_Type, &work_args, &PyTuple_Type, &work_zero,
                          &empty, &get_device, &get_stream, &owner))
        return NULL;
    Py_ssize_t n_outputs = PyTuple_GET_SIZE(output_args), n_work = PyTuple_GET_SIZE(work_args);
    Py_ssize_t n_tensors = n_inputs + n_outputs + n_work;
    if (PyTuple_GET_SIZE(input_strides) != n_inputs || PyTuple_GET_SIZE(aligned) != n_inputs ||
        PyTuple_GET_SIZE(same_as) != n_inputs ||
        PyTuple_GET_SIZE(work_zero) != n_work || n_tensors > MAX_TENSORS || n_outputs < 1 ||
        PyList_GET_SIZE(kernels) < 1) {
        PyErr_SetString(PyExc_ValueError, "Launcher: inconsistent argument counts");
        return NULL;
    }
    if (launch == 0 || (n_work > 0 && memset_address == 0)) {
        PyErr_SetString(PyExc_ValueError, "Launcher: missing driver entry point");
        return NULL;
    }
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->launch = (launch_fn)(uintptr_t)launch;
    self->launch_cooperative = (cooperative_fn)(uintptr_t)cooperative_address;
    self->memset_async = (memset_fn)(uintptr_t)memset_address;
    self->device = device;
    self->device_object = PyLong_FromLong(device);
    self->n_inputs = n_inputs;
    self->n_outputs = n_outputs;
    self->n_work = n_work;
    Py_INCREF(input_strides); self->input_strides = input_strides;
    Py_INCREF(aligned); self->aligned = aligned;
    Py_INCREF(output_args); self->output_args = output_args;
    Py_INCREF(work_args); self->work_args = work_args;
    Py_INCREF(empty); self->empty = empty;
    Py_INCREF(get_device); self->get_device = get_device;
    Py_INCREF(get_stream); self->get_stream = get_stream;
    Py_INCREF(owner); self->owner = owner;
    if (self->device_object == NULL) goto fail;
    self->same_as = PyMem_Calloc(n_inputs ? n_inputs : 1, sizeof(Py_ssize_t));
    if (self->same_as == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n_inputs; i++) {
        Py_ssize_t first = PyLong_AsSsize_t(PyTuple_GET_ITEM(same_as, i));
        if (first < 0 || first > i) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Launcher: same_as names an earlier input");
            goto fail;
        }
        self->same_as[i] = first;
    }
    self->work_zero = PyMem_Calloc(n_work ? n_work : 1, sizeof(size_t));
    if (self->work_zero == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n_work; i++) {
        self->work_zero[i] = PyLong_AsSize_t(PyTuple_GET_ITEM(work_zero, i));
        if (self->work_zero[i] == (size_t)-1 && PyErr_Occurred()) goto fail;
    }
    Py_ssize_t n_kernels = PyList_GET_SIZE(kernels);
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

static PyObject *Launcher_call(Launcher *self, PyObject *call_args, PyObject *kwargs) {
    PyObject *inputs;
    if (!PyArg_ParseTuple(call_args, "O", &inputs)) return NULL;
    PyObject *fast = PySequence_Fast(inputs, "Launcher: inputs must be a sequence");
    if (fast == NULL) return NULL;
    PyObject *result = NULL, *outputs = NULL, *work = NULL, *value = NULL;
    unsigned long long pointers[MAX_TENSORS];
    Py_ssize_t n = self->n_inputs;
    if (PySequence_Fast_GET_SIZE(fast) != n) goto decline;

    value = PyObject_CallNoArgs(self->get_device);
    if (value == NULL) goto done;
    long current = PyLong_AsLong(value);
    Py_CLEAR(value);
    if (current == -1 && PyErr_Occurred()) goto done;
    if (current != self->device) goto decline;

    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        value = PyObject_CallMethodNoArgs(items[i], stride_name);
        if (value == NULL) goto done;
        int same = PyObject_RichCompareBool(value, PyTuple_GET_ITEM(self->input_strides, i), Py_EQ);
        Py_CLEAR(value);
        if (same < 0) goto done;
        if (!same) goto decline;
        if (fetch_pointer(items[i], &pointers[i]) < 0) goto done;
        if (PyTuple_GET_ITEM(self->aligned, i) == Py_True && (pointers[i] & 15)) goto decline;
        if (pointers[i] != pointers[self->same_as[i]]) goto decline;
    }

    outputs = allocate(self->empty, self->output_args, &pointers[n]);
    if (outputs == NULL) goto done;
    n += self->n_outputs;

    value = PyObject_CallOneArg(self->get_stream, self->device_object);
    if (value == NULL) goto done;
    void *stream = PyLong_AsVoidPtr(value);
    Py_CLEAR(value);
    if (PyErr_Occurred()) goto done;

    /* work buffers are kept until the launches are enqueued, then freed stream-ordered */
    if (self->n_work) {
        work = allocate(self->empty, self->work_args, &pointers[n]);
        if (work == NULL) goto done;
    }
    for (Py_ssize_t i = 0; i < self->n_work; i++) {
        if (self->work_zero[i]) {
            int status = self->memset_async(pointers[n + i], 0, self->work_zero[i], stream);
            if (status != 0) {
                PyErr_Format(PyExc_RuntimeError, "cuMemsetD8Async failed (CUresult %d)", status);
                goto done;
            }
        }
    }

    for (Py_ssize_t k = 0; k < self->n_kernels; k++) {
        Kernel *kernel = &self->kernels[k];
        for (Py_ssize_t i = 0; i < kernel->n_params; i++) {
            if (kernel->slots[i] >= 0) /* -1: a constant, the build's bytes */
                memcpy(kernel->params[i], &pointers[kernel->slots[i]], sizeof(unsigned long long));
        }
        unsigned *d = kernel->dims;
        int status = kernel->cooperative
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
    Py_INCREF(Py_None);
    result = Py_None;
done:
    Py_XDECREF(value);
    Py_XDECREF(outputs);
    Py_XDECREF(work);
    Py_DECREF(fast);
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

static PyObject *Launcher_get_constants(Launcher *self, void *closure) {
    Py_ssize_t count = 0;
    for (Py_ssize_t k = 0; k < self->n_kernels; k++)
        for (Py_ssize_t i = 0; i < self->kernels[k].n_params; i++) count += self->kernels[k].slots[i] < 0;
    return PyLong_FromSsize_t(count);
}

static PyGetSetDef Launcher_getset[] = {
    {"constants", (getter)Launcher_get_constants, NULL, "scalar arguments launched with the build's bytes", NULL},
    {"launches", (getter)Launcher_get_launches, NULL, "calls that launched so far", NULL},
    {"work_buffers", (getter)Launcher_get_work_buffers, NULL, "work buffers allocated per call", NULL},
    {"dims", (getter)Launcher_get_dims, NULL, "per kernel: ((grid), (block), dynamic shared memory)", NULL},
    {NULL},
};

static PyType_Slot Launcher_slots[] = {
    {Py_tp_new, Launcher_new},
    {Py_tp_dealloc, Launcher_dealloc},
    {Py_tp_call, Launcher_call},
    {Py_tp_getset, Launcher_getset},
    {Py_tp_doc, "A region's kernels' launcher: call with the inputs; returns the outputs, or None to decline."},
    {0, NULL},
};

static PyType_Spec Launcher_spec = {
    "dynamo_nvf._nvf_launcher.Launcher", sizeof(Launcher), 0, Py_TPFLAGS_DEFAULT, Launcher_slots,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nvf_launcher", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__nvf_launcher(void) {
    data_ptr_name = PyUnicode_InternFromString("data_ptr");
    stride_name = PyUnicode_InternFromString("stride");
    if (data_ptr_name == NULL || stride_name == NULL) return NULL;
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
