/* tpurt launch's output relay: every line a task prints goes to the launcher's own
 * stdout or stderr with the task's index before it ("[2] ..."). */
#ifndef TPURT_TOOL_LAUNCH_OUTPUT_H
#define TPURT_TOOL_LAUNCH_OUTPUT_H

#include <stddef.h>

/* A line longer than this is printed in pieces of this size, each with its prefix. */
#define LINE_CAP (64 * 1024)

/* One of a task's output pipes and the line it has not finished yet. */
typedef struct out_stream {
  int fd;       /* the read end; -1 after EOF */
  int dest;     /* STDOUT_FILENO or STDERR_FILENO */
  char *line;   /* LINE_CAP + 1 bytes, allocated at the first read */
  size_t len;
} out_stream;

/* Called with every complete line a task prints on stdout, before it is relayed; a
 * non-zero return consumes the line (tpurt launch's progress lines, launch.c). */
typedef int (*line_hook)(int index, const char *text, size_t len);
void set_line_hook(line_hook hook);

/* One read of s->fd, relaying its complete lines; EOF or an error closes the stream. */
void read_stream(int index, out_stream *s);
/* Relays what is left (the unfinished line too) and closes the stream. */
void close_stream(int index, out_stream *s);

#endif
