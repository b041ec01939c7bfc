#ifndef CFCGI_SHIM_H
#define CFCGI_SHIM_H
#include <fcgiapp.h>
#endif
