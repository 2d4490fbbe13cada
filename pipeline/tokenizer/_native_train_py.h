// The Python side of native training (_native_train.h): the ChunkCounter and PairMerger types.
// Part of the native tokenizer core: _native.cpp includes it after Python.h and calls add_training_types.
#pragma once

#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "_native_train.h"

namespace lmprep_native_py {

using lmprep_native::CountTable;
using lmprep_native::PairMerger;
using lmprep_native::Units;

// Refuses a second call while one runs without the GIL (another Python thread on the same object).
inline bool claim(bool &busy, const char *type) {
    if (busy) {
        PyErr_Format(PyExc_RuntimeError, "this %s is in use by another thread", type);
        return false;
    }
    busy = true;
    return true;
}

// ---- ChunkCounter: distinct chunks and their counts, split and counted by threads ------------------

struct ChunkCounterObject {
    PyObject_HEAD
    int mode;
    bool busy;
    std::vector<CountTable> *tables;  // one per thread
};

int ChunkCounter_init(ChunkCounterObject *self, PyObject *args, PyObject *) {
    int mode, threads;
    if (!PyArg_ParseTuple(args, "ii", &mode, &threads)) return -1;
    if (!lmprep_native::valid_mode(mode)) {
        PyErr_Format(PyExc_ValueError, "unknown split mode %d", mode);
        return -1;
    }
    if (threads < 1 || threads > 1024) {
        PyErr_Format(PyExc_ValueError, "threads must be 1 to 1024, got %d", threads);
        return -1;
    }
    if (self->tables) {
        PyErr_SetString(PyExc_RuntimeError, "ChunkCounter is initialised once");
        return -1;
    }
    self->tables = new (std::nothrow) std::vector<CountTable>(static_cast<size_t>(threads));
    if (!self->tables) {
        PyErr_NoMemory();
        return -1;
    }
    self->mode = mode;
    return 0;
}

void ChunkCounter_dealloc(ChunkCounterObject *self) {
    delete self->tables;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

bool check_counter(ChunkCounterObject *self) {
    if (!self->tables) PyErr_SetString(PyExc_ValueError, "ChunkCounter was not initialised");
    return self->tables != nullptr;
}

// add(texts): count the chunks of a sequence of str, without the GIL, the texts sliced among the threads.
PyObject *ChunkCounter_add(ChunkCounterObject *self, PyObject *texts) {
    if (!check_counter(self)) return nullptr;
    PyObject *fast = PySequence_Fast(texts, "add takes a sequence of str");
    if (!fast) return nullptr;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    std::vector<Units> views;
    std::vector<PyObject *> held;  // a reference to each text: another thread may change a list meanwhile
    auto release = [&]() {
        for (PyObject *text : held) Py_DECREF(text);
        Py_DECREF(fast);
    };
    try {
        views.reserve(static_cast<size_t>(n));
        held.reserve(static_cast<size_t>(n));
    } catch (const std::bad_alloc &) {
        release();
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "add takes str, got %.100s at position %zd", Py_TYPE(text)->tp_name, i);
            release();
            return nullptr;
        }
        Py_INCREF(text);
        held.push_back(text);
        views.push_back(Units{static_cast<int>(PyUnicode_KIND(text)), PyUnicode_IS_ASCII(text) != 0,
                              PyUnicode_DATA(text), static_cast<size_t>(PyUnicode_GET_LENGTH(text))});
    }
    if (!claim(self->busy, "ChunkCounter")) {
        release();
        return nullptr;
    }
    bool out_of_memory = false;
    Py_BEGIN_ALLOW_THREADS
    try {
        lmprep_native::count_texts(views, self->mode, *self->tables);
    } catch (...) {  // bad_alloc, or system_error from a thread that could not start
        out_of_memory = true;
    }
    Py_END_ALLOW_THREADS
    self->busy = false;
    release();
    if (out_of_memory) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

// pop_counts() -> dict[str, int]: every chunk counted so far (the counter starts over).
PyObject *ChunkCounter_pop_counts(ChunkCounterObject *self, PyObject *) {
    if (!check_counter(self) || !claim(self->busy, "ChunkCounter")) return nullptr;
    std::vector<CountTable> &tables = *self->tables;
    bool out_of_memory = false;
    Py_BEGIN_ALLOW_THREADS
    try {
        for (size_t t = 1; t < tables.size(); t++) tables[0].absorb(tables[t]);
    } catch (const std::bad_alloc &) {
        out_of_memory = true;
    }
    Py_END_ALLOW_THREADS
    self->busy = false;
    if (out_of_memory) return PyErr_NoMemory();
    PyObject *counts = PyDict_New();
    if (!counts) return nullptr;
    bool failed = false;
    tables[0].each([&](const char *key, size_t length, int64_t count) {
        if (failed) return;
        PyObject *chunk = PyUnicode_DecodeUTF8(key, static_cast<Py_ssize_t>(length), "surrogatepass");
        PyObject *times = chunk ? PyLong_FromLongLong(count) : nullptr;
        failed = !times || PyDict_SetItem(counts, chunk, times) < 0;
        Py_XDECREF(chunk);
        Py_XDECREF(times);
    });
    tables[0] = CountTable();
    if (failed) Py_CLEAR(counts);
    return counts;
}

// pop_byte_layout() -> (symbols, counts) | None: the byte kind's layout of _train_pairs (int32 bytes) of
// the chunks counted so far, and their counts (int64 bytes), the counter starting over; None, the
// counts kept, if a chunk holds a lone surrogate (which UTF-8 cannot hold).
PyObject *ChunkCounter_pop_byte_layout(ChunkCounterObject *self, PyObject *) {
    if (!check_counter(self) || !claim(self->busy, "ChunkCounter")) return nullptr;
    std::vector<CountTable> &tables = *self->tables;
    lmprep_native::ByteLayoutSize size;
    bool out_of_memory = false;
    Py_BEGIN_ALLOW_THREADS
    try {
        for (size_t t = 1; t < tables.size(); t++) tables[0].absorb(tables[t]);
        size = lmprep_native::byte_layout_size(tables[0]);
    } catch (const std::bad_alloc &) {
        out_of_memory = true;
    }
    Py_END_ALLOW_THREADS
    self->busy = false;
    if (out_of_memory) return PyErr_NoMemory();
    if (size.surrogate) Py_RETURN_NONE;
    PyObject *symbols = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size.symbols * sizeof(int32_t)));
    PyObject *counts = symbols ? PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size.chunks * sizeof(int64_t)))
                               : nullptr;
    PyObject *result = counts ? PyTuple_Pack(2, symbols, counts) : nullptr;
    if (result) {
        lmprep_native::fill_byte_layout(tables[0], reinterpret_cast<int32_t *>(PyBytes_AS_STRING(symbols)),
                                        reinterpret_cast<int64_t *>(PyBytes_AS_STRING(counts)));
        tables[0] = CountTable();
    }
    Py_XDECREF(symbols);
    Py_XDECREF(counts);
    return result;
}

PyMethodDef ChunkCounter_methods[] = {
    {"add", reinterpret_cast<PyCFunction>(ChunkCounter_add), METH_O,
     "add(texts): count the chunks of each str of the sequence (threads share the texts)."},
    {"pop_counts", reinterpret_cast<PyCFunction>(ChunkCounter_pop_counts), METH_NOARGS,
     "pop_counts() -> dict[str, int]: the counts so far; the counter starts over."},
    {"pop_byte_layout", reinterpret_cast<PyCFunction>(ChunkCounter_pop_byte_layout), METH_NOARGS,
     "pop_byte_layout() -> (symbols, counts) | None: the byte kind's training layout of the counts so far "
     "(the counter starts over), or None, the counts kept, if a chunk holds a lone surrogate."},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject ChunkCounterType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---- PairMerger: the merge loop ------------------------------------------------------------------

struct PairMergerObject {
    PyObject_HEAD
    bool busy;
    PairMerger *merger;
};

int PairMerger_init(PairMergerObject *self, PyObject *args, PyObject *) {
    Py_buffer symbols, counts;
    unsigned int first_id;
    long long min_frequency, forbidden;
    if (!PyArg_ParseTuple(args, "y*y*ILL", &symbols, &counts, &first_id, &min_frequency, &forbidden)) return -1;
    int status = -1;
    if (self->merger) {
        PyErr_SetString(PyExc_RuntimeError, "PairMerger is initialised once");
    } else if (symbols.len % sizeof(int32_t) || counts.len % sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "PairMerger takes int32 symbols and int64 counts");
    } else if (min_frequency < 1 || first_id > 0x10FFFF) {
        PyErr_SetString(PyExc_ValueError, "PairMerger: min_frequency must be >= 1 and first_id a possible ID");
    } else if (claim(self->busy, "PairMerger")) {  // another thread may be initialising it without the GIL
        PairMerger *merger = nullptr;
        std::string problem;  // a copy: the exception's own text ends with the catch block
        bool out_of_memory = false;
        Py_BEGIN_ALLOW_THREADS
        try {
            merger = new PairMerger(static_cast<const int32_t *>(symbols.buf), symbols.len / sizeof(int32_t),
                                    static_cast<const int64_t *>(counts.buf), counts.len / sizeof(int64_t), first_id,
                                    min_frequency, forbidden);
        } catch (const std::bad_alloc &) {
            out_of_memory = true;
        } catch (const std::invalid_argument &exc) {
            problem = exc.what();
        } catch (const std::length_error &exc) {
            problem = exc.what();
        }
        Py_END_ALLOW_THREADS
        self->busy = false;
        if (out_of_memory) PyErr_NoMemory();
        else if (!problem.empty()) PyErr_Format(PyExc_ValueError, "PairMerger: %s", problem.c_str());
        else {
            self->merger = merger;
            status = 0;
        }
    }
    PyBuffer_Release(&symbols);
    PyBuffer_Release(&counts);
    return status;
}

void PairMerger_dealloc(PairMergerObject *self) {
    delete self->merger;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

// merge(limit) -> list[tuple[int, int]]: up to limit more merges, fewer once no pair may be merged.
PyObject *PairMerger_merge(PairMergerObject *self, PyObject *arg) {
    if (!self->merger) {
        PyErr_SetString(PyExc_ValueError, "PairMerger was not initialised");
        return nullptr;
    }
    const size_t limit = PyLong_AsSize_t(arg);
    if (limit == static_cast<size_t>(-1) && PyErr_Occurred()) return nullptr;
    if (!claim(self->busy, "PairMerger")) return nullptr;
    std::vector<PairMerger::Merge> merges;
    std::string problem;  // a copy: the exception's own text ends with the catch block
    bool out_of_memory = false;
    Py_BEGIN_ALLOW_THREADS
    try {
        self->merger->merge(limit, merges);
    } catch (const std::bad_alloc &) {
        out_of_memory = true;
    } catch (const std::length_error &exc) {
        problem = exc.what();
    }
    Py_END_ALLOW_THREADS
    self->busy = false;
    if (out_of_memory) return PyErr_NoMemory();
    if (!problem.empty()) return PyErr_Format(PyExc_ValueError, "PairMerger: %s", problem.c_str());
    PyObject *result = PyList_New(static_cast<Py_ssize_t>(merges.size()));
    if (!result) return nullptr;
    for (size_t i = 0; i < merges.size(); i++) {
        PyObject *pair = Py_BuildValue("(II)", merges[i].first, merges[i].second);
        if (!pair) {
            Py_DECREF(result);
            return nullptr;
        }
        PyList_SET_ITEM(result, static_cast<Py_ssize_t>(i), pair);
    }
    return result;
}

PyMethodDef PairMerger_methods[] = {
    {"merge", reinterpret_cast<PyCFunction>(PairMerger_merge), METH_O,
     "merge(limit) -> list[tuple[int, int]]: up to limit more merges (left, right IDs), fewer once none is left."},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject PairMergerType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// Readies both types and adds them to the module; false with a Python error set.
inline bool add_training_types(PyObject *module) {
    ChunkCounterType.tp_name = "pipeline.tokenizer._native.ChunkCounter";
    ChunkCounterType.tp_basicsize = sizeof(ChunkCounterObject);
    ChunkCounterType.tp_flags = Py_TPFLAGS_DEFAULT;
    ChunkCounterType.tp_doc = "ChunkCounter(mode, threads): the distinct chunks of texts under a named pattern "
                              "(0 gpt4, 1 gpt2, 2 word, 3 none) and their counts.";
    ChunkCounterType.tp_new = PyType_GenericNew;
    ChunkCounterType.tp_init = reinterpret_cast<initproc>(ChunkCounter_init);
    ChunkCounterType.tp_dealloc = reinterpret_cast<destructor>(ChunkCounter_dealloc);
    ChunkCounterType.tp_methods = ChunkCounter_methods;
    PairMergerType.tp_name = "pipeline.tokenizer._native.PairMerger";
    PairMergerType.tp_basicsize = sizeof(PairMergerObject);
    PairMergerType.tp_flags = Py_TPFLAGS_DEFAULT;
    PairMergerType.tp_doc = "PairMerger(symbols, counts, first_id, min_frequency, forbidden): BPE training's merge "
                            "loop over the layout of _train_pairs (int32 symbols, int64 counts; forbidden: an ID "
                            "no merge may hold, or -1).";
    PairMergerType.tp_new = PyType_GenericNew;
    PairMergerType.tp_init = reinterpret_cast<initproc>(PairMerger_init);
    PairMergerType.tp_dealloc = reinterpret_cast<destructor>(PairMerger_dealloc);
    PairMergerType.tp_methods = PairMerger_methods;
    return PyType_Ready(&ChunkCounterType) == 0 && PyType_Ready(&PairMergerType) == 0 &&
           PyModule_AddObjectRef(module, "ChunkCounter", reinterpret_cast<PyObject *>(&ChunkCounterType)) == 0 &&
           PyModule_AddObjectRef(module, "PairMerger", reinterpret_cast<PyObject *>(&PairMergerType)) == 0;
}

}  // namespace lmprep_native_py
