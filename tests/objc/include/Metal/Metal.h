// Linux stand-in for <Metal/Metal.h>: declarations of just the Foundation and Metal
// classes, protocols, types and constants cpp/metal/*.mm use, so clang can
// syntax/type-check those files without the macOS SDK (tests/objc/check_objc.py).
// Signatures follow Apple's Metal and Foundation documentation; enum values are
// Apple's. Add a declaration here only when a .mm file starts using it.
//
// SDK versions: every declaration is in the macOS 14 SDK (Xcode 15, the oldest the
// build supports) unless it sits under `#if METALRT_TEST_SDK >= <version>`, the SDK
// that introduced it (Apple's documentation pages give "macOS <version>+").
// check_objc.py compiles each .mm twice: with the newest SDK (the default here) and
// with -DMETALRT_TEST_SDK=140000, where those declarations vanish as they do from
// the real macOS 14 SDK. Availability.h's macros follow the same value.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifndef METALRT_TEST_SDK
#define METALRT_TEST_SDK 150000
#endif
#define __MAC_OS_X_VERSION_MAX_ALLOWED METALRT_TEST_SDK
#define __MAC_14_0 140000
#if METALRT_TEST_SDK >= 150000
#define __MAC_15_0 150000
#endif

typedef unsigned long NSUInteger;
typedef long NSInteger;
typedef signed char BOOL;
#define YES ((BOOL)1)
#define NO ((BOOL)0)
#define nil nullptr
typedef double CFTimeInterval;

@protocol NSObject
@end

__attribute__((objc_root_class))
@interface NSObject <NSObject>
+ (instancetype)alloc;
- (instancetype)init;
@end

typedef NSUInteger NSStringEncoding;
enum { NSUTF8StringEncoding = 4 };

@interface NSString : NSObject
- (instancetype)initWithCString:(const char*)nullTerminatedCString encoding:(NSStringEncoding)encoding;
- (const char*)UTF8String;
@end

typedef struct {
  NSInteger majorVersion;
  NSInteger minorVersion;
  NSInteger patchVersion;
} NSOperatingSystemVersion;

@interface NSProcessInfo : NSObject
+ (NSProcessInfo*)processInfo;
- (NSOperatingSystemVersion)operatingSystemVersion;
@end

@interface NSArray<ObjectType> : NSObject
- (NSUInteger)count;
- (ObjectType)objectAtIndex:(NSUInteger)index;
@end

@interface NSError : NSObject
- (NSString*)localizedDescription;
@end

@interface NSURL : NSObject
+ (NSURL*)fileURLWithPath:(NSString*)path;
@end

typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize size = {width, height, depth};
  return size;
}

typedef enum : NSUInteger {
  MTLResourceStorageModeShared = 0,
} MTLResourceOptions;

typedef enum : NSInteger {
  MTLGPUFamilyApple1 = 1001,
  MTLGPUFamilyApple2 = 1002,
  MTLGPUFamilyApple3 = 1003,
  MTLGPUFamilyApple4 = 1004,
  MTLGPUFamilyApple5 = 1005,
  MTLGPUFamilyApple6 = 1006,
  MTLGPUFamilyApple7 = 1007,
  MTLGPUFamilyApple8 = 1008,
  MTLGPUFamilyApple9 = 1009,
  MTLGPUFamilyMac2 = 2002,
} MTLGPUFamily;

typedef enum : NSUInteger {
  MTLDataTypeFloat = 3,
  MTLDataTypeHalf = 16,
  MTLDataTypeInt = 29,
  MTLDataTypeUInt = 33,
  MTLDataTypeShort = 37,
  MTLDataTypeUShort = 41,
  MTLDataTypeBool = 53,
} MTLDataType;

typedef enum : NSUInteger {
  MTLCommandBufferStatusNotEnqueued = 0,
  MTLCommandBufferStatusEnqueued = 1,
  MTLCommandBufferStatusCommitted = 2,
  MTLCommandBufferStatusScheduled = 3,
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5,
} MTLCommandBufferStatus;

@protocol MTLBuffer <NSObject>
- (void*)contents;
- (NSUInteger)length;
@end

@protocol MTLFunction <NSObject>
@end

@interface MTLFunctionConstantValues : NSObject
- (void)setConstantValue:(const void*)value type:(MTLDataType)type atIndex:(NSUInteger)index;
@end

typedef enum : NSUInteger {
  MTLLanguageVersion3_1 = (3 << 16) + 1,
} MTLLanguageVersion;

#if METALRT_TEST_SDK >= 150000   // macOS 15.0
typedef enum : NSInteger {
  MTLMathModeSafe = 0,
  MTLMathModeRelaxed = 1,
  MTLMathModeFast = 2,
} MTLMathMode;

typedef enum : NSInteger {
  MTLMathFloatingPointFunctionsFast = 0,
  MTLMathFloatingPointFunctionsPrecise = 1,
} MTLMathFloatingPointFunctions;
#endif

@interface MTLCompileOptions : NSObject
- (void)setFastMathEnabled:(BOOL)enabled;
- (void)setLanguageVersion:(MTLLanguageVersion)languageVersion;
#if METALRT_TEST_SDK >= 150000   // macOS 15.0
- (void)setMathMode:(MTLMathMode)mathMode;
- (void)setMathFloatingPointFunctions:(MTLMathFloatingPointFunctions)mathFloatingPointFunctions;
#endif
@end

@protocol MTLLibrary <NSObject>
- (NSArray<NSString*>*)functionNames;
- (id<MTLFunction>)newFunctionWithName:(NSString*)name;
- (id<MTLFunction>)newFunctionWithName:(NSString*)name
                        constantValues:(MTLFunctionConstantValues*)constantValues
                                 error:(NSError**)error;
@end

@protocol MTLComputePipelineState <NSObject>
- (NSUInteger)maxTotalThreadsPerThreadgroup;
- (NSUInteger)threadExecutionWidth;
- (NSUInteger)staticThreadgroupMemoryLength;
@end

@protocol MTLComputeCommandEncoder <NSObject>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)dispatchThreads:(MTLSize)threadsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)endEncoding;
@end

@protocol MTLCommandBuffer <NSObject>
- (id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (void)commit;
- (void)waitUntilCompleted;
- (MTLCommandBufferStatus)status;
- (NSError*)error;
- (CFTimeInterval)GPUStartTime;
- (CFTimeInterval)GPUEndTime;
@end

@protocol MTLCommandQueue <NSObject>
- (id<MTLCommandBuffer>)commandBuffer;
@end

@protocol MTLDevice <NSObject>
- (NSString*)name;
- (BOOL)hasUnifiedMemory;
- (NSUInteger)maxThreadgroupMemoryLength;
- (NSUInteger)maxBufferLength;
- (uint64_t)recommendedMaxWorkingSetSize;
- (NSUInteger)currentAllocatedSize;
- (BOOL)supportsFamily:(MTLGPUFamily)family;
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytesNoCopy:(void*)pointer
                                   length:(NSUInteger)length
                                  options:(MTLResourceOptions)options
                              deallocator:(void (^)(void* pointer, NSUInteger length))deallocator;
- (id<MTLLibrary>)newLibraryWithURL:(NSURL*)url error:(NSError**)error;
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source options:(MTLCompileOptions*)options error:(NSError**)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)function error:(NSError**)error;
@end

#ifdef __cplusplus
extern "C"
#endif
id<MTLDevice> MTLCreateSystemDefaultDevice(void);
