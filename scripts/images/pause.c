/* A pod sandbox's process: it only holds the pod's namespaces open. It reaps the orphans
   it inherits as PID 1 and exits at once on SIGTERM or SIGINT. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signal_number) {
  (void)signal_number;
  _exit(0);
}

static void on_child(int signal_number) {
  (void)signal_number;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  sigaction(SIGTERM, &stop, NULL);
  sigaction(SIGINT, &stop, NULL);
  sigaction(SIGCHLD, &child, NULL);
  for (;;) pause();
}
