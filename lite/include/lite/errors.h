// Exceptions thrown by the runtime. The Python binding maps them to Python exception types.
#pragma once
#include <stdexcept>
#include <string>

namespace lite {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file that is not a valid .ms model: truncated, corrupted, wrong version, hostile.
class ModelFormatError : public Error {
 public:
  using Error::Error;
};

// A request the caller got wrong: input count or shape, bad option value.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A dtype the caller or the model got wrong.
class TypeMismatch : public Error {
 public:
  using Error::Error;
};

// Memory the run needs and cannot get (the activation arena of a huge input shape): Python's MemoryError, naming
// what asked for it.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// A valid model that needs something this build does not implement.
class NotSupported : public Error {
 public:
  using Error::Error;
};

}  // namespace lite
