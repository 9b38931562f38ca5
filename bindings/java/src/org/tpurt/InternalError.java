package org.tpurt;

/** Status code 13 (TensorFlow's InternalError). */
public class InternalError extends OpError {
  public InternalError(String message) {
    super(13, message);
  }
}
