/* tpurt: the command-line front end of the tpurt runtime (public C ABI only). */
#include <stdio.h>
#include <string.h>

#include "common.h"

static const tool_command *const commands[] = {&info_command, &bench_command, &demo_command,
                                               &launch_command, &trace_command};
#define NUM_COMMANDS (sizeof commands / sizeof commands[0])

static void print_overview(FILE *out) {
  fputs("usage: tpurt <command> [options]\n\ncommands:\n", out);
  for (size_t i = 0; i < NUM_COMMANDS; i++)
    fprintf(out, "  %-8s %s\n", commands[i]->name, commands[i]->summary);
  fputs("  version  print the tool and runtime versions\n"
        "\n"
        "`tpurt <command> --help` (or `tpurt help <command>`) lists a command's options.\n"
        "Exit status: 0 success, 1 a library call or a check failed, 2 bad usage.\n",
        out);
}

static const tool_command *find_command(const char *name) {
  for (size_t i = 0; i < NUM_COMMANDS; i++)
    if (!strcmp(commands[i]->name, name)) return commands[i];
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_overview(stderr);
    return EXIT_USAGE;
  }
  const char *name = argv[1];
  if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
    if (argc > 2 && strcmp(name, "help") == 0) {
      const tool_command *command = find_command(argv[2]);
      if (!command) {
        fprintf(stderr, "tpurt help: unknown command '%s'\n", argv[2]);
        return EXIT_USAGE;
      }
      return print_usage(command->usage);
    }
    print_overview(stdout);
    return 0;
  }
  if (!strcmp(name, "version") || !strcmp(name, "--version")) {
    printf("tpurt %d.%d.%d (runtime %s)\n", TPU_VERSION_MAJOR, TPU_VERSION_MINOR,
           TPU_VERSION_PATCH, tpu_version());
    return 0;
  }
  const tool_command *command = find_command(name);
  if (!command) {
    fprintf(stderr, "tpurt: unknown command '%s'\n\n", name);
    print_overview(stderr);
    return EXIT_USAGE;
  }
  tool_command_name = command->name;
  return command->run(argc - 1, argv + 1);
}
