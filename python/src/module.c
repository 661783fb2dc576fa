/* crescent._crescent: CPython extension module (C, no C++) exposing the
 * Transfer Engine and the Store client of libcrescent with Mooncake's Python
 * API. The thin Python packages `crescent` and `mooncake` (python/compat)
 * wrap the types defined here. */
#include "pyutil.h"

#include "crescent/common.h"

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
    (void)m;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (v < INT32_MIN || v > INT32_MAX)
        return PyErr_Format(PyExc_ValueError, "status out of range");
    return PyUnicode_FromString(cr_strerror((int)v));
}

static PyMethodDef mod_methods[] = {
    {"strerror", mod_strerror, METH_O, "strerror(status) -> str: description of a crescent status code"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef mod_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "crescent._crescent",
    .m_doc = "crescent native bindings (Transfer Engine, Store client)",
    .m_size = -1,
    .m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__crescent(void)
{
    PyObject *m = PyModule_Create(&mod_def);
    if (!m)
        return NULL;
    if (PyModule_AddStringConstant(m, "__version__", cr_version()) < 0 ||
        cr__py_engine_types_ready(m) < 0 || cr__py_store_types_ready(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
