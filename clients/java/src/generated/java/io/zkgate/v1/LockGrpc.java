package io.zkgate.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: zkgate/v1/lock.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class LockGrpc {

  private LockGrpc() {}

  public static final String SERVICE_NAME = "zkgate.v1.Lock";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.AcquireRequest,
      io.zkgate.v1.AcquireResponse> getAcquireMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Acquire",
      requestType = io.zkgate.v1.AcquireRequest.class,
      responseType = io.zkgate.v1.AcquireResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.AcquireRequest,
      io.zkgate.v1.AcquireResponse> getAcquireMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.AcquireRequest, io.zkgate.v1.AcquireResponse> getAcquireMethod;
    if ((getAcquireMethod = LockGrpc.getAcquireMethod) == null) {
      synchronized (LockGrpc.class) {
        if ((getAcquireMethod = LockGrpc.getAcquireMethod) == null) {
          LockGrpc.getAcquireMethod = getAcquireMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.AcquireRequest, io.zkgate.v1.AcquireResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Acquire"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.AcquireRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.AcquireResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LockMethodDescriptorSupplier("Acquire"))
              .build();
        }
      }
    }
    return getAcquireMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.ReleaseRequest,
      io.zkgate.v1.ReleaseResponse> getReleaseMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Release",
      requestType = io.zkgate.v1.ReleaseRequest.class,
      responseType = io.zkgate.v1.ReleaseResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.ReleaseRequest,
      io.zkgate.v1.ReleaseResponse> getReleaseMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.ReleaseRequest, io.zkgate.v1.ReleaseResponse> getReleaseMethod;
    if ((getReleaseMethod = LockGrpc.getReleaseMethod) == null) {
      synchronized (LockGrpc.class) {
        if ((getReleaseMethod = LockGrpc.getReleaseMethod) == null) {
          LockGrpc.getReleaseMethod = getReleaseMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.ReleaseRequest, io.zkgate.v1.ReleaseResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Release"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ReleaseRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ReleaseResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LockMethodDescriptorSupplier("Release"))
              .build();
        }
      }
    }
    return getReleaseMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.HoldersRequest,
      io.zkgate.v1.HoldersResponse> getHoldersMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Holders",
      requestType = io.zkgate.v1.HoldersRequest.class,
      responseType = io.zkgate.v1.HoldersResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.HoldersRequest,
      io.zkgate.v1.HoldersResponse> getHoldersMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.HoldersRequest, io.zkgate.v1.HoldersResponse> getHoldersMethod;
    if ((getHoldersMethod = LockGrpc.getHoldersMethod) == null) {
      synchronized (LockGrpc.class) {
        if ((getHoldersMethod = LockGrpc.getHoldersMethod) == null) {
          LockGrpc.getHoldersMethod = getHoldersMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.HoldersRequest, io.zkgate.v1.HoldersResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Holders"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.HoldersRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.HoldersResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LockMethodDescriptorSupplier("Holders"))
              .build();
        }
      }
    }
    return getHoldersMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.LockValidateRequest,
      io.zkgate.v1.LockValidateResponse> getValidateMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Validate",
      requestType = io.zkgate.v1.LockValidateRequest.class,
      responseType = io.zkgate.v1.LockValidateResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.LockValidateRequest,
      io.zkgate.v1.LockValidateResponse> getValidateMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.LockValidateRequest, io.zkgate.v1.LockValidateResponse> getValidateMethod;
    if ((getValidateMethod = LockGrpc.getValidateMethod) == null) {
      synchronized (LockGrpc.class) {
        if ((getValidateMethod = LockGrpc.getValidateMethod) == null) {
          LockGrpc.getValidateMethod = getValidateMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.LockValidateRequest, io.zkgate.v1.LockValidateResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Validate"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.LockValidateRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.LockValidateResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LockMethodDescriptorSupplier("Validate"))
              .build();
        }
      }
    }
    return getValidateMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static LockStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LockStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LockStub>() {
        @java.lang.Override
        public LockStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LockStub(channel, callOptions);
        }
      };
    return LockStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static LockBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LockBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LockBlockingStub>() {
        @java.lang.Override
        public LockBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LockBlockingStub(channel, callOptions);
        }
      };
    return LockBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static LockFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LockFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LockFutureStub>() {
        @java.lang.Override
        public LockFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LockFutureStub(channel, callOptions);
        }
      };
    return LockFutureStub.newStub(factory, channel);
  }

  /**
   */
  public static abstract class LockImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Queue for a lock (or one of N permits) and hold it while the stream is open.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<io.zkgate.v1.AcquireRequest> acquire(
        io.grpc.stub.StreamObserver<io.zkgate.v1.AcquireResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getAcquireMethod(), responseObserver);
    }

    /**
     * <pre>
     * Release from any gateway, by lease.
     * </pre>
     */
    public void release(io.zkgate.v1.ReleaseRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ReleaseResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReleaseMethod(), responseObserver);
    }

    /**
     * <pre>
     * Who holds it and how many wait.
     * </pre>
     */
    public void holders(io.zkgate.v1.HoldersRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.HoldersResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getHoldersMethod(), responseObserver);
    }

    /**
     * <pre>
     * Is this fencing token a current holder's?
     * </pre>
     */
    public void validate(io.zkgate.v1.LockValidateRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.LockValidateResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getValidateMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getAcquireMethod(),
            io.grpc.stub.ServerCalls.asyncBidiStreamingCall(
              new MethodHandlers<
                io.zkgate.v1.AcquireRequest,
                io.zkgate.v1.AcquireResponse>(
                  this, METHODID_ACQUIRE)))
          .addMethod(
            getReleaseMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.zkgate.v1.ReleaseRequest,
                io.zkgate.v1.ReleaseResponse>(
                  this, METHODID_RELEASE)))
          .addMethod(
            getHoldersMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.zkgate.v1.HoldersRequest,
                io.zkgate.v1.HoldersResponse>(
                  this, METHODID_HOLDERS)))
          .addMethod(
            getValidateMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.zkgate.v1.LockValidateRequest,
                io.zkgate.v1.LockValidateResponse>(
                  this, METHODID_VALIDATE)))
          .build();
    }
  }

  /**
   */
  public static final class LockStub extends io.grpc.stub.AbstractAsyncStub<LockStub> {
    private LockStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LockStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LockStub(channel, callOptions);
    }

    /**
     * <pre>
     * Queue for a lock (or one of N permits) and hold it while the stream is open.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<io.zkgate.v1.AcquireRequest> acquire(
        io.grpc.stub.StreamObserver<io.zkgate.v1.AcquireResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncBidiStreamingCall(
          getChannel().newCall(getAcquireMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * Release from any gateway, by lease.
     * </pre>
     */
    public void release(io.zkgate.v1.ReleaseRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ReleaseResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReleaseMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Who holds it and how many wait.
     * </pre>
     */
    public void holders(io.zkgate.v1.HoldersRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.HoldersResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getHoldersMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Is this fencing token a current holder's?
     * </pre>
     */
    public void validate(io.zkgate.v1.LockValidateRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.LockValidateResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getValidateMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   */
  public static final class LockBlockingStub extends io.grpc.stub.AbstractBlockingStub<LockBlockingStub> {
    private LockBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LockBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LockBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Release from any gateway, by lease.
     * </pre>
     */
    public io.zkgate.v1.ReleaseResponse release(io.zkgate.v1.ReleaseRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReleaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Who holds it and how many wait.
     * </pre>
     */
    public io.zkgate.v1.HoldersResponse holders(io.zkgate.v1.HoldersRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getHoldersMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Is this fencing token a current holder's?
     * </pre>
     */
    public io.zkgate.v1.LockValidateResponse validate(io.zkgate.v1.LockValidateRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getValidateMethod(), getCallOptions(), request);
    }
  }

  /**
   */
  public static final class LockFutureStub extends io.grpc.stub.AbstractFutureStub<LockFutureStub> {
    private LockFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LockFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LockFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Release from any gateway, by lease.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.zkgate.v1.ReleaseResponse> release(
        io.zkgate.v1.ReleaseRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReleaseMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Who holds it and how many wait.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.zkgate.v1.HoldersResponse> holders(
        io.zkgate.v1.HoldersRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getHoldersMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Is this fencing token a current holder's?
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.zkgate.v1.LockValidateResponse> validate(
        io.zkgate.v1.LockValidateRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getValidateMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_RELEASE = 0;
  private static final int METHODID_HOLDERS = 1;
  private static final int METHODID_VALIDATE = 2;
  private static final int METHODID_ACQUIRE = 3;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final LockImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(LockImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_RELEASE:
          serviceImpl.release((io.zkgate.v1.ReleaseRequest) request,
              (io.grpc.stub.StreamObserver<io.zkgate.v1.ReleaseResponse>) responseObserver);
          break;
        case METHODID_HOLDERS:
          serviceImpl.holders((io.zkgate.v1.HoldersRequest) request,
              (io.grpc.stub.StreamObserver<io.zkgate.v1.HoldersResponse>) responseObserver);
          break;
        case METHODID_VALIDATE:
          serviceImpl.validate((io.zkgate.v1.LockValidateRequest) request,
              (io.grpc.stub.StreamObserver<io.zkgate.v1.LockValidateResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_ACQUIRE:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.acquire(
              (io.grpc.stub.StreamObserver<io.zkgate.v1.AcquireResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class LockBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    LockBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.zkgate.v1.LockOuterClass.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Lock");
    }
  }

  private static final class LockFileDescriptorSupplier
      extends LockBaseDescriptorSupplier {
    LockFileDescriptorSupplier() {}
  }

  private static final class LockMethodDescriptorSupplier
      extends LockBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    LockMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (LockGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new LockFileDescriptorSupplier())
              .addMethod(getAcquireMethod())
              .addMethod(getReleaseMethod())
              .addMethod(getHoldersMethod())
              .addMethod(getValidateMethod())
              .build();
        }
      }
    }
    return result;
  }
}
