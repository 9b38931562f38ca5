/* tpurt launch's output relay (launch_output.h): complete lines with their task's
 * prefix, a line longer than LINE_CAP in pieces, and a reader gone (`| head`) passed on
 * to the task as its pipe closing. */
#define _GNU_SOURCE

#include "launch_output.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static int dest_broken[3];  /* a write to this fd failed: its output is dropped */
static line_hook hook;

void set_line_hook(line_hook h) { hook = h; }

static void write_all(int fd, const char *p, size_t n) {
  while (n && !dest_broken[fd]) {
    ssize_t w = write(fd, p, n);
    if (w >= 0) {
      p += w;
      n -= (size_t)w;
    } else if (errno == EAGAIN) {  /* a non-blocking stdout we inherited */
      struct pollfd pfd = {fd, POLLOUT, 0};
      if (poll(&pfd, 1, 1000) <= 0) dest_broken[fd] = 1;
    } else if (errno != EINTR) {
      dest_broken[fd] = 1;
    }
  }
}

static void emit_line(int index, int dest, const char *text, size_t len) {
  static char buf[32 + LINE_CAP + 1];
  int prefix = snprintf(buf, 32, "[%d] ", index);
  memcpy(buf + prefix, text, len);
  buf[(size_t)prefix + len] = '\n';
  write_all(dest, buf, (size_t)prefix + len + 1);
}

/* Prints the complete lines in s->line; at EOF also the unfinished one. */
static void emit_lines(int index, out_stream *s, int eof) {
  size_t start = 0;
  for (;;) {
    char *nl = memchr(s->line + start, '\n', s->len - start);
    if (!nl) break;
    size_t end = (size_t)(nl - s->line);
    if (!(hook && s->dest == STDOUT_FILENO && hook(index, s->line + start, end - start)))
      emit_line(index, s->dest, s->line + start, end - start);
    start = end + 1;
  }
  size_t rest = s->len - start;
  /* The buffer holds LINE_CAP + 1 bytes, so a line of exactly LINE_CAP bytes and its
   * newline still come out whole; only a longer one is split. */
  if (rest > LINE_CAP || (eof && rest)) {
    size_t piece = rest > LINE_CAP ? LINE_CAP : rest;
    emit_line(index, s->dest, s->line + start, piece);
    start += piece;
    rest -= piece;
    if (eof && rest) {
      emit_line(index, s->dest, s->line + start, rest);
      start += rest;
      rest = 0;
    }
  }
  memmove(s->line, s->line + start, rest);
  s->len = rest;
}

static void drop_stream(out_stream *s) {
  close(s->fd);
  s->fd = -1;
  free(s->line);
  s->line = NULL;
}

void close_stream(int index, out_stream *s) {
  if (s->fd < 0) return;
  if (s->line) emit_lines(index, s, 1);
  drop_stream(s);
}

/* One read; EOF or an error closes the stream. */
void read_stream(int index, out_stream *s) {
  if (!s->line) s->line = xcalloc(LINE_CAP + 1, 1);
  ssize_t n = read(s->fd, s->line + s->len, LINE_CAP + 1 - s->len);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    close_stream(index, s);
    return;
  }
  s->len += (size_t)n;
  emit_lines(index, s, 0);
  if (dest_broken[s->dest]) {
    /* Nobody reads the launcher's output any more (`tpurt launch ... | head`): the
     * task's next write gets SIGPIPE, as it would without the launcher between. */
    drop_stream(s);
  }
}
