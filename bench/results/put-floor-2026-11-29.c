/* put-floor-2026-11-29.c - the floor of a small put's hops (bench/results/put-cpu-2026-11-29.md):
 * CPU per sequential exchange of 100 B messages between plain processes, no hoplite code.
 * Not built by CMake: gcc -O2 -o put-floor put-floor-2026-11-29.c && ./put-floor MODE N
 * MODE 1: client <-tcp-> server (request/reply); 2: client <-unix-> relay <-tcp-> server (the
 * relay forwards, waits for the answer, answers: a put without PUBLISH); 3: as 2, the client first
 * writing a one-way message to the server over its own tcp connection (a PUBLISH). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <time.h>
#define M 100
static void rd(int fd,char*b,int n){int g=0;while(g<n){int r=read(fd,b+g,n-g);if(r<=0)exit(0);g+=r;}}
static void tcp_pair(int *a,int *b){int l=socket(AF_INET,SOCK_STREAM,0);struct sockaddr_in s={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)};socklen_t sl=sizeof s;bind(l,(void*)&s,sl);listen(l,4);getsockname(l,(void*)&s,&sl);*a=socket(AF_INET,SOCK_STREAM,0);connect(*a,(void*)&s,sl);*b=accept(l,0,0);int one=1;setsockopt(*a,IPPROTO_TCP,TCP_NODELAY,&one,4);setsockopt(*b,IPPROTO_TCP,TCP_NODELAY,&one,4);close(l);}
static double cpu_self(void){struct rusage r;getrusage(RUSAGE_SELF,&r);return r.ru_utime.tv_sec*1e6+r.ru_utime.tv_usec+r.ru_stime.tv_sec*1e6+r.ru_stime.tv_usec;}
static int n;
static void report(const char*who,double c0){printf("  %-7s %.1f us/op\n",who,(cpu_self()-c0)/n);fflush(stdout);}
int main(int argc,char**argv){int mode=atoi(argv[1]);n=atoi(argv[2]);char b[M];memset(b,1,M);
  int cs[2],rs[2],pub[2];
  socketpair(AF_UNIX,SOCK_STREAM,0,cs);tcp_pair(&rs[0],&rs[1]);tcp_pair(&pub[0],&pub[1]);
  if(fork()==0){ /* server: epoll loop */
    close(rs[0]);close(pub[0]);close(cs[0]);close(cs[1]);
    double c0=cpu_self();int ep=epoll_create1(0);struct epoll_event e={.events=EPOLLIN};
    e.data.fd=rs[1];epoll_ctl(ep,EPOLL_CTL_ADD,rs[1],&e);e.data.fd=pub[1];epoll_ctl(ep,EPOLL_CTL_ADD,pub[1],&e);
    int done=0;while(!done){struct epoll_event ev[4];int k=epoll_wait(ep,ev,4,-1);for(int i=0;i<k;i++){int fd=ev[i].data.fd;int r=read(fd,b,M);if(r<=0){done=1;break;}if(r<M)rd(fd,b+r,M-r);if(fd==rs[1])write(fd,b,M);}}
    report("server",c0);exit(0);}
  if(mode>=2&&fork()==0){ /* relay */
    close(rs[1]);close(pub[0]);close(pub[1]);close(cs[0]);
    double c0=cpu_self();for(int i=0;i<n;i++){rd(cs[1],b,M);write(rs[0],b,M);rd(rs[0],b,M);write(cs[1],b,M);}report("relay",c0);exit(0);}
  close(rs[1]);close(pub[1]);close(cs[1]);if(mode>=2){close(rs[0]);}
  double c0=cpu_self();struct timespec t0,t1;clock_gettime(CLOCK_MONOTONIC,&t0);
  for(int i=0;i<n;i++){
    if(mode==1){write(rs[0],b,M);rd(rs[0],b,M);}
    else{if(mode==3)write(pub[0],b,M);write(cs[0],b,M);rd(cs[0],b,M);}}
  clock_gettime(CLOCK_MONOTONIC,&t1);report("client",c0);
  printf("  latency %.1f us/op\n",((t1.tv_sec-t0.tv_sec)*1e9+(t1.tv_nsec-t0.tv_nsec))/1e3/n);
  if(mode==1)close(rs[0]);
  close(pub[0]);close(cs[0]);while(wait(0)>0);return 0;}
