#pragma once
/* Stand-ins for the Metal declarations metal.m uses (see Foundation/Foundation.h here), each
 * declared as Apple's Metal headers declare it (names, types, enum values), without the
 * availability and nullability annotations. */
#import <Foundation/Foundation.h>
typedef struct { NSUInteger width, height, depth; } MTLSize;
static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
    MTLSize size = {width, height, depth}; return size; }
typedef enum MTLLanguageVersion : NSUInteger { MTLLanguageVersion2_3 = (2 << 16) + 3 } MTLLanguageVersion;
typedef enum MTLResourceOptions : NSUInteger { MTLResourceStorageModeShared = 0 } MTLResourceOptions;
typedef enum MTLResourceUsage : NSUInteger { MTLResourceUsageRead = 1 << 0, MTLResourceUsageWrite = 1 << 1, MTLResourceUsageSample = 1 << 2 } MTLResourceUsage;
typedef enum MTLDispatchType : NSUInteger { MTLDispatchTypeSerial = 0, MTLDispatchTypeConcurrent = 1 } MTLDispatchType;
typedef enum MTLBarrierScope : NSUInteger { MTLBarrierScopeBuffers = 1 << 0, MTLBarrierScopeTextures = 1 << 1, MTLBarrierScopeRenderTargets = 1 << 2 } MTLBarrierScope;
typedef enum MTLCommandBufferStatus : NSUInteger { MTLCommandBufferStatusNotEnqueued = 0, MTLCommandBufferStatusEnqueued = 1, MTLCommandBufferStatusCommitted = 2, MTLCommandBufferStatusScheduled = 3, MTLCommandBufferStatusCompleted = 4, MTLCommandBufferStatusError = 5 } MTLCommandBufferStatus;
@protocol MTLResource <NSObject> @end
@protocol MTLBuffer <MTLResource> @property (readonly) void *contents; @property (readonly) NSUInteger length; @end
@protocol MTLArgumentEncoder <NSObject>
@property (readonly) NSUInteger encodedLength;
@property (readonly) NSUInteger alignment;
- (void)setArgumentBuffer:(id<MTLBuffer>)argumentBuffer offset:(NSUInteger)offset;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
@end
@protocol MTLFunction <NSObject>
- (id<MTLArgumentEncoder>)newArgumentEncoderWithBufferIndex:(NSUInteger)bufferIndex;
@end
@protocol MTLLibrary <NSObject> - (id<MTLFunction>)newFunctionWithName:(NSString *)functionName; @end
@protocol MTLComputePipelineState <NSObject> @property (readonly) NSUInteger maxTotalThreadsPerThreadgroup; @end
@protocol MTLCommandEncoder <NSObject> - (void)endEncoding; @end
@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)useResource:(id<MTLResource>)resource usage:(MTLResourceUsage)usage;
- (void)memoryBarrierWithScope:(MTLBarrierScope)scope;
@end
@protocol MTLCommandBuffer <NSObject>
@property (readonly) MTLCommandBufferStatus status;
@property (readonly) NSError *error;
- (id<MTLComputeCommandEncoder>)computeCommandEncoderWithDispatchType:(MTLDispatchType)dispatchType;
- (void)commit;
- (void)waitUntilCompleted;
@end
@protocol MTLCommandQueue <NSObject> - (id<MTLCommandBuffer>)commandBuffer; @end
@interface MTLCompileOptions : NSObject @property (readwrite) MTLLanguageVersion languageVersion; @property (readwrite) BOOL fastMathEnabled; @end
@protocol MTLDevice <NSObject>
@property (readonly) NSString *name;
@property (readonly) BOOL hasUnifiedMemory;
@property (readonly) NSUInteger maxBufferLength;
@property (readonly) uint64_t recommendedMaxWorkingSetSize;
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLLibrary>)newLibraryWithSource:(NSString *)source options:(MTLCompileOptions *)options error:(NSError **)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction error:(NSError **)error;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytesNoCopy:(void *)pointer length:(NSUInteger)length options:(MTLResourceOptions)options deallocator:(void (^)(void *pointer, NSUInteger length))deallocator;
@end
id<MTLDevice> MTLCreateSystemDefaultDevice(void);
NSArray<id<MTLDevice>> *MTLCopyAllDevices(void) __attribute__((ns_returns_retained));
