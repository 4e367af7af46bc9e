// The one error hierarchy of hypic, from the kernels up: typed errors for what a user can cause (files,
// configs, templates, ids, options, a device that fails) all derive from hypic::Error, so a program (and
// the CLI's exit codes) needs one catch. Programmer errors use HYPIC_ASSERT, which stays on in release
// builds (unlike assert()).
#pragma once
#include <stdexcept>
#include <string>

namespace hypic {

// Base of every error a user can cause. The message names the place (file, tensor, key, line).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class IoError : public Error {  // missing, unreadable or truncated file
 public:
  using Error::Error;
};

class FormatError : public Error {  // a file that parses but is malformed (JSON, safetensors header, YAML)
 public:
  using Error::Error;
};

class ModelError : public Error {  // unsupported config, missing tensor, wrong shape
 public:
  using Error::Error;
};

class InvalidArgument : public Error {  // bad request values: an id outside the vocabulary, an unknown option
 public:
  using Error::Error;
};

class DeviceError : public Error {  // the accelerator or its libraries failed (out of device memory, a failed call)
 public:
  using Error::Error;
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace hypic

#define HYPIC_ASSERT(cond, msg)                                            \
  do {                                                                     \
    if (!(cond)) ::hypic::assert_fail(#cond, __FILE__, __LINE__, (msg));   \
  } while (0)
