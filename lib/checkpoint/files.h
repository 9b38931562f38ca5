// Durable files for checkpoints: written under a temporary name, synced, renamed and
// the directory synced, with their SHA-256 computed as they are written; read back
// through a mapping. Errors name the file and map errno to a status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"

namespace tpurt {
namespace checkpoint {

// Throws the status errno `err` maps to (TPU_PERMISSION_DENIED, TPU_RESOURCE_EXHAUSTED
// for a full disk, TPU_NOT_FOUND, else TPU_UNAVAILABLE) with "what path: strerror".
[[noreturn]] void fail_errno(int err, const std::string& what, const std::string& path);

// mkdir that accepts an existing directory.
void make_dir(const std::string& path);
void sync_dir(const std::string& path);

class DurableFile {
 public:
  // Creates dir/name.tmp-<tag> (tag: the writer, so tasks never share one).
  DurableFile(const std::string& dir, const std::string& name, const std::string& tag);
  ~DurableFile();  // removes the temporary file unless finished
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void write(const void* data, size_t n);
  // fsync, rename to dir/name, fsync dir: the entry the manifest lists.
  FileEntry finish();

 private:
  std::string dir_, name_, tmp_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  void* sha_ = nullptr;  // EVP_MD_CTX
};

// A file mapped read-only, checked against its manifest entry: TPU_DATA_LOSS naming the
// file when it is missing, shorter or longer, or its SHA-256 differs.
class MappedFile {
 public:
  MappedFile(const std::string& dir, const FileEntry& entry);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return static_cast<const unsigned char*>(data_); }
  uint64_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

std::string read_small_file(const std::string& path, size_t limit);

// The steps of dir's ckpt-<step> directories, newest first (none if dir is missing).
std::vector<int64_t> list_steps(const std::string& dir);
std::string step_dir(const std::string& dir, int64_t step);
// Removes a checkpoint directory's files and the directory (best effort).
void remove_step_dir(const std::string& path);

}  // namespace checkpoint
}  // namespace tpurt
