#include "checkpoint/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/status.h"

namespace tpurt {
namespace checkpoint {

namespace {

std::string hex(const unsigned char* p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

EVP_MD_CTX* new_sha256() {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx);
    fail(TPU_INTERNAL, "SHA-256 is not available from libcrypto");
  }
  return ctx;
}

std::string finish_sha256(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  return hex(md, n);
}

// A plain "ckpt-<digits>" name: its step, else -1.
int64_t step_of_name(const char* name) {
  if (std::strncmp(name, "ckpt-", 5) != 0) return -1;
  const char* p = name + 5;
  if (*p == '\0' || std::strlen(p) > 18) return -1;
  int64_t step = 0;
  for (; *p; ++p) {
    if (*p < '0' || *p > '9') return -1;
    step = step * 10 + (*p - '0');
  }
  return step;
}

}  // namespace

void fail_errno(int err, const std::string& what, const std::string& path) {
  tpu_status code = TPU_UNAVAILABLE;
  if (err == EACCES || err == EPERM || err == EROFS) code = TPU_PERMISSION_DENIED;
  if (err == ENOSPC || err == EDQUOT) code = TPU_RESOURCE_EXHAUSTED;
  if (err == ENOENT || err == ENOTDIR) code = TPU_NOT_FOUND;
  fail(code, what, " ", path, ": ", std::strerror(err));
}

void make_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0777) != 0 && errno != EEXIST) fail_errno(errno, "cannot create directory", path);
}

void sync_dir(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_errno(errno, "cannot open directory", path);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0 && err != EINVAL) fail_errno(err, "cannot sync directory", path);
}

DurableFile::DurableFile(const std::string& dir, const std::string& name, const std::string& tag)
    : dir_(dir), name_(name), tmp_(dir + "/" + name + ".tmp-" + tag) {
  fd_ = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) fail_errno(errno, "cannot create", tmp_);
  sha_ = new_sha256();
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(tmp_.c_str());
  }
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(sha_));
}

void DurableFile::write(const void* data, size_t n) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(sha_), data, n);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail_errno(errno, "cannot write", tmp_);
    }
    p += w;
    n -= static_cast<size_t>(w);
    bytes_ += static_cast<uint64_t>(w);
  }
}

FileEntry DurableFile::finish() {
  if (fsync(fd_) != 0) fail_errno(errno, "cannot sync", tmp_);
  const int rc = close(fd_);
  fd_ = -1;
  if (rc != 0) {
    const int err = errno;
    unlink(tmp_.c_str());
    fail_errno(err, "cannot close", tmp_);
  }
  const std::string path = dir_ + "/" + name_;
  if (rename(tmp_.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp_.c_str());
    fail_errno(err, "cannot rename to", path);
  }
  sync_dir(dir_);
  return {name_, bytes_, finish_sha256(static_cast<EVP_MD_CTX*>(sha_))};
}

MappedFile::MappedFile(const std::string& dir, const FileEntry& entry) {
  const std::string path = dir + "/" + entry.path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) fail(TPU_DATA_LOSS, "checkpoint file ", path, " is missing");
    fail_errno(errno, "cannot open", path);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    fail_errno(err, "cannot stat", path);
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ != entry.bytes) {
    close(fd);
    fail(TPU_DATA_LOSS, "checkpoint file ", path, " is ", size_ < entry.bytes ? "truncated" : "too long", ": ",
         size_, " bytes, the manifest says ", entry.bytes);
  }
  if (size_ > 0) {
    data_ = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data_ == MAP_FAILED) {
      const int err = errno;
      data_ = nullptr;
      close(fd);
      fail_errno(err, "cannot map", path);
    }
  }
  close(fd);
  EVP_MD_CTX* ctx = new_sha256();
  EVP_DigestUpdate(ctx, data_, size_);
  const std::string sum = finish_sha256(ctx);
  EVP_MD_CTX_free(ctx);
  if (sum != entry.sha256) {
    if (data_) munmap(data_, size_);
    data_ = nullptr;
    fail(TPU_DATA_LOSS, "checkpoint file ", path, " has SHA-256 ", sum, ", the manifest says ", entry.sha256);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(data_, size_);
}

std::string read_small_file(const std::string& path, size_t limit) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(errno, "cannot open", path);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      fail_errno(err, "cannot read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limit) {
      close(fd);
      fail(TPU_DATA_LOSS, path, " is larger than ", limit, " bytes");
    }
  }
  close(fd);
  return out;
}

std::vector<int64_t> list_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return steps;
    fail_errno(errno, "cannot list", dir);
  }
  while (struct dirent* e = readdir(d)) {
    const int64_t s = step_of_name(e->d_name);
    if (s >= 0) steps.push_back(s);
  }
  closedir(d);
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

std::string step_dir(const std::string& dir, int64_t step) { return str_cat(dir, "/ckpt-", step); }

void remove_step_dir(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return;
  while (struct dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    unlink((path + "/" + e->d_name).c_str());
  }
  closedir(d);
  rmdir(path.c_str());
}

}  // namespace checkpoint
}  // namespace tpurt
