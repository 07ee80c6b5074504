/* The pod sandbox's infra process: PID 1 of the pod's shared namespaces. It waits for
 * signals, reaps orphaned children, and exits 0 on SIGINT or SIGTERM. Built statically by
 * hack/images/build.sh into registry.k8s.io/pause. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("pause (ferrokube)");
    return 0;
  }
  struct sigaction term;
  memset(&term, 0, sizeof term);
  term.sa_handler = on_term;
  struct sigaction child;
  memset(&child, 0, sizeof child);
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGINT, &term, NULL) != 0 || sigaction(SIGTERM, &term, NULL) != 0 ||
      sigaction(SIGCHLD, &child, NULL) != 0) {
    perror("sigaction");
    return 1;
  }
  for (;;) {
    pause();
  }
}
