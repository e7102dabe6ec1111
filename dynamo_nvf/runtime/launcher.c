/* Direct launch's per-call path in C (built by runtime/c_launcher.py, loaded as dynamo_nvf._nvf_launcher).
 *
 * Why C: from Python, a direct call spent ~8.5 us (session 14, H100) checking inputs, allocating
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
typedef int (*memset_fn)(unsigned long long dst, unsigned char value, size_t bytes, void *stream);

#define MAX_TENSORS 256

typedef struct {
    PyObject_HEAD
    launch_fn launch;
    memset_fn memset_async;
    void *function;
    unsigned dims[7]; /* grid x, y, z; block x, y, z; dynamic shared memory */
    long device;
    PyObject *device_object; /* the device index as an int, for get_stream */
    Py_ssize_t n_inputs, n_outputs, n_work;
    PyObject *input_strides; /* tuple of each input's stride() */
    PyObject *aligned;       /* tuple of bools: input pointer was 16-byte aligned at build */
    PyObject *output_args;   /* tuple of (shape, strides, dtype) argument tuples for `empty` */
    PyObject *work_args;     /* the same for each work buffer */
    PyObject *work_zero;     /* tuple of ints: bytes to zero in each work buffer (0: none) */
    PyObject *empty, *get_device, *get_stream;
    PyObject *owner; /* keeps nvFuser's executor cache (the kernel's module) alive */
    char *storage;   /* every argument's bytes */
    void **params;   /* kernelParams: one pointer per argument into storage */
    Py_ssize_t n_params;
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
    Py_XDECREF(self->work_zero);
    Py_XDECREF(self->empty);
    Py_XDECREF(self->get_device);
    Py_XDECREF(self->get_stream);
    Py_XDECREF(self->owner);
    Py_XDECREF(self->device_object);
    PyMem_Free(self->storage);
    PyMem_Free(self->params);
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

/* Launcher(launch, memset, function, dims, device, arguments, n_inputs, input_strides, aligned,
 *          output_args, work_args, work_zero, empty, get_device, get_stream, owner)
 * `arguments` is a list of bytes, one per kernel parameter: inputs, outputs, then work buffers, each
 * starting with its data pointer. */
static PyObject *Launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    unsigned long long launch, memset_address, function;
    PyObject *dims, *arguments, *input_strides, *aligned, *output_args, *work_args, *work_zero;
    PyObject *empty, *get_device, *get_stream, *owner;
    long device;
    Py_ssize_t n_inputs;
    if (!PyArg_ParseTuple(args, "KKKO!lO!nO!O!O!O!O!OOOO", &launch, &memset_address, &function, &PyTuple_Type,
                          &dims, &device, &PyList_Type, &arguments, &n_inputs, &PyTuple_Type, &input_strides,
                          &PyTuple_Type, &aligned, &PyTuple_Type, &output_args, &PyTuple_Type, &work_args,
                          &PyTuple_Type, &work_zero, &empty, &get_device, &get_stream, &owner))
        return NULL;
    Py_ssize_t n_outputs = PyTuple_GET_SIZE(output_args), n_work = PyTuple_GET_SIZE(work_args);
    Py_ssize_t n_params = PyList_GET_SIZE(arguments);
    if (PyTuple_GET_SIZE(dims) != 7 || PyTuple_GET_SIZE(input_strides) != n_inputs ||
        PyTuple_GET_SIZE(aligned) != n_inputs || PyTuple_GET_SIZE(work_zero) != n_work ||
        n_params != n_inputs + n_outputs + n_work || n_params > MAX_TENSORS) {
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
    self->memset_async = (memset_fn)(uintptr_t)memset_address;
    self->function = (void *)(uintptr_t)function;
    for (int i = 0; i < 7; i++) {
        self->dims[i] = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(dims, i));
    }
    self->device = device;
    self->device_object = PyLong_FromLong(device);
    self->n_inputs = n_inputs;
    self->n_outputs = n_outputs;
    self->n_work = n_work;
    self->n_params = n_params;
    Py_INCREF(input_strides); self->input_strides = input_strides;
    Py_INCREF(aligned); self->aligned = aligned;
    Py_INCREF(output_args); self->output_args = output_args;
    Py_INCREF(work_args); self->work_args = work_args;
    Py_INCREF(work_zero); self->work_zero = work_zero;
    Py_INCREF(empty); self->empty = empty;
    Py_INCREF(get_device); self->get_device = get_device;
    Py_INCREF(get_stream); self->get_stream = get_stream;
    Py_INCREF(owner); self->owner = owner;
    if (PyErr_Occurred()) goto fail;
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n_params; i++) {
        PyObject *raw = PyList_GET_ITEM(arguments, i);
        if (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) < 8) {
            PyErr_SetString(PyExc_ValueError, "Launcher: each argument is bytes starting with a data pointer");
            goto fail;
        }
        total += ((size_t)PyBytes_GET_SIZE(raw) + 15) & ~(size_t)15;
    }
    self->storage = PyMem_Calloc(total ? total : 16, 1);
    self->params = PyMem_Calloc(n_params ? n_params : 1, sizeof(void *));
    if (self->storage == NULL || self->params == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    size_t offset = 0;
    for (Py_ssize_t i = 0; i < n_params; i++) {
        PyObject *raw = PyList_GET_ITEM(arguments, i);
        memcpy(self->storage + offset, PyBytes_AS_STRING(raw), (size_t)PyBytes_GET_SIZE(raw));
        self->params[i] = self->storage + offset;
        offset += ((size_t)PyBytes_GET_SIZE(raw) + 15) & ~(size_t)15;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
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
    }

    outputs = PyList_New(self->n_outputs);
    if (outputs == NULL) goto done;
    for (Py_ssize_t i = 0; i < self->n_outputs; i++) {
        PyObject *tensor = PyObject_Call(self->empty, PyTuple_GET_ITEM(self->output_args, i), NULL);
        if (tensor == NULL) goto done;
        PyList_SET_ITEM(outputs, i, tensor);
        if (fetch_pointer(tensor, &pointers[n + i]) < 0) goto done;
    }
    n += self->n_outputs;

    value = PyObject_CallOneArg(self->get_stream, self->device_object);
    if (value == NULL) goto done;
    void *stream = PyLong_AsVoidPtr(value);
    Py_CLEAR(value);
    if (PyErr_Occurred()) goto done;

    if (self->n_work) {
        work = PyList_New(self->n_work);  /* kept until the launch is enqueued, then freed stream-ordered */
        if (work == NULL) goto done;
        for (Py_ssize_t i = 0; i < self->n_work; i++) {
            PyObject *tensor = PyObject_Call(self->empty, PyTuple_GET_ITEM(self->work_args, i), NULL);
            if (tensor == NULL) goto done;
            PyList_SET_ITEM(work, i, tensor);
            if (fetch_pointer(tensor, &pointers[n + i]) < 0) goto done;
            size_t zero = PyLong_AsSize_t(PyTuple_GET_ITEM(self->work_zero, i));
            if (zero == (size_t)-1 && PyErr_Occurred()) goto done;
            if (zero) {
                int status = self->memset_async(pointers[n + i], 0, zero, stream);
                if (status != 0) {
                    PyErr_Format(PyExc_RuntimeError, "cuMemsetD8Async failed (CUresult %d)", status);
                    goto done;
                }
            }
        }
    }

    for (Py_ssize_t i = 0; i < self->n_params; i++) {
        memcpy(self->params[i], &pointers[i], sizeof(unsigned long long));
    }
    int status = self->launch(self->function, self->dims[0], self->dims[1], self->dims[2], self->dims[3],
                              self->dims[4], self->dims[5], self->dims[6], stream, self->params, NULL);
    if (status != 0) {
        PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed (CUresult %d)", status);
        goto done;
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
    return Py_BuildValue("(III)(III)I", self->dims[0], self->dims[1], self->dims[2], self->dims[3], self->dims[4],
                         self->dims[5], self->dims[6]);
}

static PyObject *Launcher_get_work_buffers(Launcher *self, void *closure) {
    return PyLong_FromSsize_t(self->n_work);
}

static PyGetSetDef Launcher_getset[] = {
    {"launches", (getter)Launcher_get_launches, NULL, "kernels launched so far", NULL},
    {"work_buffers", (getter)Launcher_get_work_buffers, NULL, "work buffers allocated per call", NULL},
    {"dims", (getter)Launcher_get_dims, NULL, "((grid), (block), dynamic shared memory)", NULL},
    {NULL},
};

static PyType_Slot Launcher_slots[] = {
    {Py_tp_new, Launcher_new},
    {Py_tp_dealloc, Launcher_dealloc},
    {Py_tp_call, Launcher_call},
    {Py_tp_getset, Launcher_getset},
    {Py_tp_doc, "One kernel's launcher: call with the inputs; returns the outputs, or None to decline."},
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
